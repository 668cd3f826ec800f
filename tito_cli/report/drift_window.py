"""Where each fork and realign diverged: the held tokens against the prompt's, around the first difference.

Stands in for ``report/drift.py`` (issue #17, another branch) with the same
interface -- ``divergences(result, text=None, window=16)`` returning
:class:`Divergence` -- so ``tito view`` and ``tito inspect --drift`` switch
to it by changing one import.  The window is derived from the linearizer's
:class:`~tito_cli.algorithm.linearize.Decision`: its ``lcp`` is the index of
the first token where the turn's prompt and the tokens held for its path
differ.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..algorithm.session import SessionResult
from .session_facts import TokenText, short_decision

__all__ = ["Divergence", "divergences", "drift_points"]


@dataclass(frozen=True, slots=True)
class Divergence:
    """One fork or realign: the held tokens and the prompt's, from ``window_start`` past ``index``."""

    leaf: int
    seq: int
    #: ``fork`` or ``realign``.
    kind: str
    #: The fork cause (``ForkCause`` value), ``None`` for a realign.
    cause: str | None
    #: Position of the first token where the prompt differs from the held tokens (the lcp).
    index: int
    window_start: int
    held_ids: list[int]
    prompt_ids: list[int]
    #: ``reasoning dropped``, ``re-tokenized``, ``tool-call args re-rendered`` or ``other``;
    #: ``None`` when it cannot be told (no tokenizer).
    drift_class: str | None
    #: Tokens held before the turn (the position ``index`` is relative to), and the prompt's length.
    held_length: int = 0
    prompt_length: int = 0
    #: The two windows decoded (raw text, whitespace as it is); ``None`` without a tokenizer.
    held_text: str | None = None
    prompt_text: str | None = None


def _decode(text: TokenText | None, ids: npt.NDArray[np.int32] | list[int]) -> str | None:
    if text is None or text.tokenizer is None:
        return None
    return str(
        text.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    )


def _classify(
    text: TokenText | None, held: npt.NDArray[np.int32], prompt: npt.NDArray[np.int32], index: int, near: int
) -> str | None:
    """A short name for what changed at ``index`` (a reading aid, not used by the algorithm).

    The same text after the difference is a re-tokenization; otherwise the
    ``near`` tokens around it (a few before: a tag may start inside the
    common prefix) say whether reasoning or a tool call changed.
    """
    held_rest = _decode(text, held[index:])
    prompt_rest = _decode(text, prompt[index : len(held) + near])
    if held_rest is None or prompt_rest is None:
        return None
    if prompt_rest.startswith(held_rest) or held_rest.startswith(prompt_rest):
        return "re-tokenized"
    before = max(0, index - 4)
    held_near = _decode(text, held[before : index + near]) or ""
    prompt_near = _decode(text, prompt[before : index + near]) or ""
    if "<think>" in held_near and "<think>" not in prompt_near:
        return "reasoning dropped"
    if any(mark in held_near + prompt_near for mark in ("<tool_call>", '"arguments"', '{"')):
        return "tool-call args re-rendered"
    return "other"


def divergences(result: SessionResult, text: TokenText | None = None, window: int = 16) -> list[Divergence]:
    """Every fork and realign of a session, once per turn (the first leaf that packed it), in seq order."""
    decisions = result.linearization.turn_decisions()
    out: list[Divergence] = []
    seen: set[int] = set()
    for leaf_index, leaf in enumerate(result.tree.leaves()):
        previous = None
        for node in leaf.chain():
            turn = node.turn
            if turn is None:
                continue
            decision = decisions.get(turn.seq)
            if (
                decision is not None
                and decision.leaf == leaf_index
                and decision.kind in ("fork", "realign")
                and previous is not None
                and turn.seq not in seen
            ):
                seen.add(turn.seq)
                held = np.concatenate((previous.prompt_ids, previous.output_ids))
                prompt = turn.prompt_ids
                index = decision.lcp
                start = max(0, index - window)
                held_window = held[start : index + window]
                prompt_window = prompt[start : index + window]
                out.append(
                    Divergence(
                        leaf=leaf_index,
                        seq=turn.seq,
                        kind=decision.kind,
                        cause=decision.cause.value if decision.cause is not None else None,
                        index=index,
                        window_start=start,
                        held_ids=[int(i) for i in held_window],
                        prompt_ids=[int(i) for i in prompt_window],
                        drift_class=_classify(text, held, prompt, index, 2 * window),
                        held_length=len(held),
                        prompt_length=len(prompt),
                        held_text=_decode(text, held_window),
                        prompt_text=_decode(text, prompt_window),
                    )
                )
            previous = turn
    out.sort(key=lambda d: d.seq)
    return out


def _sample_of(result: SessionResult, leaf: int, seq: int) -> int | None:
    """The sample of ``leaf`` that packs turn ``seq`` (where its divergence shows, at the same index)."""
    for i, sample in enumerate(result.samples):
        if sample.leaf == leaf and seq in sample.seqs:
            return i
    return None


def drift_points(result: SessionResult, found: list[Divergence]) -> list[dict[str, Any]]:
    """The divergences as JSON-able rows, each with its decision's wording and the sample it shows in."""
    rows = []
    for d in found:
        decision = {"kind": d.kind, "lcp": d.index, "drift": d.held_length - d.index, "cause": d.cause}
        rows.append(
            {
                "seq": d.seq,
                "leaf": d.leaf,
                "kind": d.kind,
                "cause": d.cause,
                "label": short_decision(decision),
                "drift_class": d.drift_class,
                "index": d.index,
                "window_start": d.window_start,
                "held_length": d.held_length,
                "prompt_length": d.prompt_length,
                "held_ids": d.held_ids,
                "prompt_ids": d.prompt_ids,
                "held_text": d.held_text,
                "prompt_text": d.prompt_text,
                "sample": _sample_of(result, d.leaf, d.seq),
            }
        )
    return rows
