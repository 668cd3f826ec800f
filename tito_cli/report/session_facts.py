"""What one session is, as plain JSON-able facts: header, turns, tree, samples and their regions.

``tito inspect`` (text and ``--json``), ``tito view`` (HTML) and the golden
dumps all read a session through these functions, so each fact -- a turn's
decision, a sample's regions, why a session has no samples, how a fork cause
is worded -- has exactly one implementation.  No rich here: renderers lay the
facts out, they never re-derive them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..algorithm.linearize import Decision, LinearizedSample
from ..algorithm.policy import ForkCause
from ..algorithm.provenance import ExpertsSource, MissingRow, sample_experts
from ..algorithm.session import NoSamples, SessionResult
from ..algorithm.tree import Node
from ..turns import Turn
from .describe import message_preview, node_kind

__all__ = [
    "FORK_LABELS",
    "FORK_PHRASES",
    "NO_SAMPLES_REASONS",
    "Region",
    "capture_history",
    "clip_sample",
    "decision_dict",
    "decision_text",
    "rewrites",
    "sample_regions",
    "samples_data",
    "session_header",
    "short_decision",
    "tree_nodes",
    "turn_rows",
]


class TokenText(Protocol):
    """What the facts need to decode: a transformers tokenizer, or ``None`` for ids only.

    ``render.tokens.TokenText`` is one; the facts do not import it (they sit below the renderers).
    """

    tokenizer: Any

    def decode(self, ids: Sequence[int]) -> str:
        """A run of tokens decoded together (ids beyond the vocabulary marked)."""


# -- wording ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ForkWords:
    #: A label in a list or a column: ``fork: prompt region``.
    label: str
    #: The same in a sentence: ``forks in the prompt region``.
    phrase: str


_FORK_WORDS = {
    ForkCause.PROMPT_REGION.value: _ForkWords("prompt region", "in the prompt region"),
    ForkCause.BEFORE_LATEST_RESPONSE.value: _ForkWords("before latest response", "before the latest response"),
    ForkCause.DRIFT_TOO_LONG.value: _ForkWords("drift too long", "drift too long"),
    ForkCause.OUTPUT_TOO_LONG.value: _ForkWords("output too long to realign", "output too long to realign"),
}
#: Fork cause (``ForkCause`` value) → label; in ``ForkCause`` order.
FORK_LABELS = {cause: words.label for cause, words in _FORK_WORDS.items()}
#: Fork cause → the phrase a sentence uses.
FORK_PHRASES = {cause: words.phrase for cause, words in _FORK_WORDS.items()}

#: Why a session has no samples (``NoSamples`` value), as ``tito stats`` lists it.
NO_SAMPLES_REASONS = {
    NoSamples.ALL_SKIPPED.value: "every prompt_messages is empty (all turns skipped)",
    NoSamples.EMPTY_OUTPUTS.value: "every output is empty",
    NoSamples.NOTHING_TRAINED.value: "no trained token after a first prompt",
}


def decision_dict(decision: Decision | None, result: SessionResult) -> dict[str, Any] | None:
    if decision is None:
        return None
    return {
        "kind": decision.kind,
        "lcp": decision.lcp,
        "drift": decision.drift,
        "cause": decision.cause.value if decision.cause is not None else None,
        # What the policy's realign does to the latest response (slime-0.3: the whole of it is masked).
        "effect": result.policy.realign_effect if decision.kind == "realign" else None,
    }


def short_decision(d: dict[str, Any]) -> str:
    """``start``, ``clean``, ``realign at 81 (-27)``, ``fork: prompt region at 12 (-300)``."""
    if d["kind"] in ("start", "clean"):
        return str(d["kind"])
    where = f"at {d['lcp']:,} (-{d['drift']:,})"
    if d["kind"] == "realign":
        effect = d.get("effect")
        return f"realign {where}" + (f": {effect}" if effect else "")
    return f"fork: {FORK_LABELS[d['cause']]} {where}"


def decision_text(row: dict[str, Any]) -> str:
    """How a turn's prompt related to the tokens held before it, in a few words (from a turn row)."""
    if row["status"] == "skipped":
        return "skipped: empty prompt_messages"
    if row["status"] == "rewritten":
        return f"rewritten by seq {row['rewritten_by']} ({row['abandoned_tokens']:,} tok abandoned)"
    d = row["decision"]
    if d is None:  # pragma: no cover - every packed turn has a decision
        return "?"
    if d["kind"] == "start":
        return "start: first turn on its path"
    if d["kind"] == "clean":
        return "clean: extends held tokens"
    return short_decision(d)


# -- the session --------------------------------------------------------------


def session_header(result: SessionResult) -> dict[str, Any]:
    r = result.report
    return {
        "session_id": result.session_id,
        "policy": result.policy.describe(),
        "reward": result.info.reward,
        "finished": result.info.finished,
        "turns": r.turns,
        "skipped_turns": r.skipped_turns,
        "leaves": r.leaves,
        "samples": r.samples,
        "dropped_segments": r.dropped_segments,
        "trained_tokens": r.trained_tokens,
        "context_tokens": r.context_tokens,
        "forks": dict(sorted(r.forks.items())),
        "realigns": r.realigns,
        "rewrite_merges": r.rewrite_merges,
        "ambiguous_rewrites": r.ambiguous_rewrites,
        # Only a log that recorded provenance says these (docs/spec.md §2).
        **(
            {"auxiliary_calls": r.auxiliary_calls, "stale_samples": r.stale_samples}
            if r.provenance_turns
            else {}
        ),
    }


def _rewritten_by(merged: Node) -> int | None:
    """The seq of the turn that absorbed a rewrite: the first generated turn below the merged node."""
    seqs = [n.turn.seq for n in merged.walk() if n.turn is not None]
    return min(seqs) if seqs else None


def rewrites(result: SessionResult) -> dict[int, tuple[int | None, int]]:
    """Absorbed rewrites: abandoned seq → (the seq that absorbed it, abandoned response tokens)."""
    return {
        n.merged_rewrite.abandoned_seq: (_rewritten_by(n), n.merged_rewrite.abandoned_response_tokens)
        for n in result.tree.merges
        if n.merged_rewrite is not None
    }


def capture_history(turn: Turn) -> str | None:
    """How ``tito serve --history canonical`` built the turn's prompt (docs/spec.md §11.3), if it says.

    ``canonical`` for a continued turn, ``rendered: <reason>`` for a fallback; ``None`` for a turn
    captured any other way (the key is absent).
    """
    metadata = turn.metadata
    if not isinstance(metadata, dict) or not isinstance(metadata.get("history"), str):
        return None
    reason = metadata.get("history_reason")
    return str(metadata["history"]) + (f": {reason}" if isinstance(reason, str) else "")


def turn_provenance(turn: Turn, experts: ExpertsSource) -> dict[str, Any]:
    """A turn's weight versions (in output order), call kind, and whether the session holds its routed experts.

    ``routed_experts`` is ``complete`` when some call of the session computed the row of every position of
    this call's prompt + output (but the last) with this call's prefix, ``missing from token N`` otherwise,
    ``None`` when the session recorded none.
    """
    provenance = turn.provenance
    assert provenance is not None
    versions = [span.version for span in provenance.weight_versions or ()]
    state = None
    if experts.shape is not None:
        rows = sample_experts(np.concatenate([turn.prompt_ids, turn.output_ids]), experts)
        state = f"missing from token {rows.position}" if isinstance(rows, MissingRow) else "complete"
    return {"versions": versions, "call_kind": provenance.call_kind or "agent", "routed_experts": state}


def turn_rows(result: SessionResult) -> list[dict[str, Any]]:
    """One row per turn in seq order: lengths, finish reason and the linearizer's decision."""
    tree = result.tree
    decisions = result.linearization.turn_decisions()
    index_of = {t.seq: i + 1 for i, t in enumerate(tree.turns)}
    rewritten = rewrites(result)
    trained_in: dict[int, list[int]] = {}
    context_in: dict[int, list[int]] = {}
    for i, sample in enumerate(result.samples):
        # Trained here: claimed by this sample, unless a realign masked all of its output.
        trained = {
            span.turn.seq
            for span in sample.spans
            if span.trained and (span.end > span.start or not len(span.turn.output_ids))
        }
        for seq in sample.seqs:
            (trained_in if seq in trained else context_in).setdefault(seq, []).append(i)

    experts = ExpertsSource(tree.turns)
    # Skipped turns never reach the tree; they are listed with the others, in seq order.
    turns = {t.seq: t for t in tree.turns}
    rows: list[dict[str, Any]] = []
    for seq in sorted(set(turns) | set(tree.skipped)):
        turn = turns.get(seq)
        row: dict[str, Any] = {"seq": seq, "turn_index": index_of.get(seq)}
        if turn is None:
            row.update(
                status="skipped",
                finish_reason=None,
                prompt_tokens=None,
                output_tokens=None,
                logprobs=None,
                decision=None,
            )
        else:
            status = "rewritten" if seq in rewritten else "packed"
            row.update(
                status=status,
                finish_reason=turn.finish_reason,
                prompt_tokens=turn.prompt_length,
                output_tokens=len(turn.output_ids),
                logprobs=turn.output_logprobs is not None,
                decision=decision_dict(decisions.get(seq), result),
            )
            history = capture_history(turn)
            if history is not None:  # only logs captured with --history canonical carry it
                row["history"] = history
            if turn.provenance is not None:  # only logs that recorded provenance carry it
                row.update(turn_provenance(turn, experts))
        if seq in rewritten:
            by, tokens = rewritten[seq]
            row["rewritten_by"] = by
            row["abandoned_tokens"] = tokens
        else:
            row["rewritten_by"] = None
            row["abandoned_tokens"] = None
        row["trained_in"] = trained_in.get(seq, [])
        row["context_in"] = context_in.get(seq, [])
        rows.append(row)
    return rows


def _branch_kind(parent: Node, child: Node) -> str:
    """Why the tree splits at ``parent`` (a guess from roles, for the reader; the algorithm does not care)."""
    if parent.parent is None:
        return "sub-agent" if child.role == "system" and child.position > 0 else "main"
    if child.role == "assistant":
        if child.turn is None and child.merged_rewrite is None:
            return "history rewritten"
        return "retry" if child.position > 0 else "first try"
    if child.position == 0:
        return "original"
    if parent.role == "system":
        return "restart (compaction?)"
    return "history diverges"


def tree_nodes(result: SessionResult) -> list[dict[str, Any]]:
    """The routing tree, flat in depth-first order: each node names its parent by id."""
    leaf_of = {id(leaf): i for i, leaf in enumerate(result.tree.leaves())}
    decisions = result.linearization.turn_decisions()
    samples_of: dict[int, list[int]] = {}
    for i, sample in enumerate(result.samples):
        samples_of.setdefault(sample.leaf, []).append(i)
    ids: dict[int, int] = {}
    nodes: list[dict[str, Any]] = []
    for node in result.tree.root.walk():
        if node.parent is None:
            continue
        ids[id(node)] = len(nodes)
        parent = node.parent
        turn = node.turn
        merged = node.merged_rewrite
        leaf = leaf_of.get(id(node))
        nodes.append(
            {
                "id": len(nodes),
                "parent": ids.get(id(parent)),
                "role": node.role,
                "kind": node_kind(node),
                "preview": message_preview(node.message, width=200),
                "seq": turn.seq if turn is not None else None,
                "turn_index": node.turn_index if turn is not None else None,
                "prompt_tokens": turn.prompt_length if turn is not None else None,
                "output_tokens": len(turn.output_ids) if turn is not None else None,
                "finish_reason": turn.finish_reason if turn is not None else None,
                "decision": decision_dict(decisions.get(turn.seq), result) if turn is not None else None,
                "merged_rewrite": None
                if merged is None
                else {
                    "abandoned_seq": merged.abandoned_seq,
                    "abandoned_turn_index": merged.abandoned_turn_index,
                    "abandoned_response_tokens": merged.abandoned_response_tokens,
                },
                "tools": len(node.tools) if isinstance(node.tools, list) else None,
                "branch": _branch_kind(parent, node) if len(parent.children) > 1 else None,
                "leaf": leaf,
                "samples": samples_of.get(leaf, []) if leaf is not None else [],
            }
        )
    return nodes


# -- a sample's regions ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Region:
    """Positions ``[start, end)`` of a sample's tokens, and where they came from.

    A sample's tokens are contiguous regions: the first prompt, then for each
    packed turn the part of its prompt not already held (tool results, user
    messages) and its output span.  Output spans of trained turns carry loss 1
    (all of it, or what survived a realign); everything else is context.
    """

    kind: str  # "first_prompt", "prompt" (a later turn's new prompt tokens) or "output"
    seq: int
    start: int
    end: int
    trained: bool
    #: For an output cut by a realign: how many of its tokens were generated in all.
    generated: int | None = None


def sample_regions(sample: LinearizedSample) -> list[Region]:
    """The regions of a sample, from the linearizer's spans (so they are its loss mask, not a guess)."""
    spans = sample.spans
    regions = [Region("first_prompt", spans[0].turn.seq, 0, sample.first_prompt_length, False)]
    position = sample.first_prompt_length
    for span in spans:
        if span.start > position:
            regions.append(Region("prompt", span.turn.seq, position, span.start, False))
        generated = len(span.turn.output_ids)
        regions.append(
            Region(
                "output",
                span.turn.seq,
                span.start,
                span.end,
                span.trained,
                generated if span.end - span.start != generated else None,
            )
        )
        position = span.end
    if position != len(sample.tokens):  # pragma: no cover - the linearizer's invariant
        raise AssertionError(f"regions cover {position} of {len(sample.tokens)} tokens")
    return regions


def _decode_raw(text: TokenText, ids: list[int]) -> str | None:
    if text.tokenizer is None:
        return None
    return text.decode(ids)


def samples_data(result: SessionResult, text: TokenText, indices: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """Every sample (or those in ``indices``) with its reward and regions (ids, and decoded text with a tokenizer)."""
    out = []
    wanted = None if indices is None else set(indices)
    for i, (sample, reward) in enumerate(zip(result.samples, result.rewards, strict=True)):
        if wanted is not None and i not in wanted:
            continue
        regions = []
        for r in sample_regions(sample):
            ids = [int(t) for t in sample.tokens[r.start : r.end]]
            regions.append(
                {
                    "kind": r.kind,
                    "seq": r.seq,
                    "start": r.start,
                    "end": r.end,
                    "trained": r.trained,
                    "generated": r.generated,
                    "ids": ids,
                    "text": _decode_raw(text, ids),
                }
            )
        out.append(
            {
                "index": i,
                "leaf": sample.leaf,
                "segment": sample.segment,
                "reward": reward,
                "fork": sample.fork.value if sample.fork is not None else None,
                "turns": list(sample.seqs),
                "trained_turns": list(sample.trained_seqs),
                "tokens": len(sample.tokens),
                "first_prompt_length": sample.first_prompt_length,
                "response_length": sample.response_length,
                "trained_tokens": int(sample.loss_mask.sum()),
                "flags": sample.flags,
                "cut_at": sample.cut_at,
                "regions": regions,
            }
        )
    return out


def clip_sample(
    sample: dict[str, Any],
    text: TokenText,
    *,
    seqs: range | None = None,
    tokens: range | None = None,
    focus: int | None = None,
) -> dict[str, Any]:
    """A sample from :func:`samples_data` keeping only the regions of turns in ``seqs`` and the positions in
    ``tokens`` (both optional); a region cut by ``tokens`` keeps its kind, with its ids and text cut to match.

    ``shown`` records what was kept, so a reader knows the rest exists.
    """
    regions = []
    for region in sample["regions"]:
        if seqs is not None and region["seq"] not in seqs:
            continue
        start, end = region["start"], region["end"]
        if tokens is not None:
            start, end = max(start, tokens.start), min(end, tokens.stop)
            if start >= end and not (region["start"] == region["end"] and region["start"] in tokens):
                continue
        ids = region["ids"][start - region["start"] : end - region["start"]]
        cut = (start, end) != (region["start"], region["end"])
        regions.append(
            {
                **region,
                "start": start,
                "end": end,
                "ids": ids,
                "text": _decode_raw(text, ids) if cut and region["text"] is not None else region["text"],
            }
        )
    shown = {
        "turns": None if seqs is None else [seqs.start, seqs.stop - 1],
        "tokens": None if tokens is None else [max(tokens.start, 0), min(tokens.stop, sample["tokens"])],
        #: The token asked about (``--around``), marked where it is shown.
        "focus": focus,
    }
    return {**sample, "regions": regions, "shown": shown}
