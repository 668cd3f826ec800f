"""Where each fork and realign diverged, what text that is, and the likely reason.

For every turn the linearizer forked or realigned (SPEC §4), the tokens held
before it (the previous turn's prompt and output) and the turn's prompt
share a common prefix of ``index`` tokens; :func:`divergences` reports that
index, the ids of both sides around it and, when a tokenizer is at hand,
both decoded with whitespace made visible, plus a class:

* ``re-tokenized``: the same text, different ids (a non-canonical output
  spelled canonically in the replay, a cut reply re-encoded), judged over
  at most the next 1,024 held tokens;
* ``reasoning dropped``: the held side has a reasoning block (Qwen3's and
  DeepSeek's ``<think>…</think>``, harmony's ``analysis`` message) that the
  prompt lacks (a template that strips earlier reasoning);
* ``tool-call args re-rendered``: the divergence lies inside a tool call
  that reads as the same call on both sides (JSON spacing or key order,
  harmony's call header written another way);
* ``whitespace trimmed``: one side has whitespace where the texts part and
  both go on alike without it (a client or template that trims content);
* ``reply not replayed``: the prompt stops where the held tokens go on: the call was made again
  without the latest reply (a retry after an aborted reply, a resent prompt);
* ``first message differs``: the prompt parts from the held tokens before its second message: a
  sub-agent's call or a new task (another system prompt), or a tool list that changed;
* ``other``: anything else (an edited message).

The last two are what a routing tree mostly keeps apart (a resent prompt is a sibling leaf, a
sub-agent its own subtree): ``--policy trl``, which reads a session's calls in order, meets them.

The markers are the model family's (:mod:`tito_cli.families`), recognised
from the tokenizer itself or its hub name; a tokenizer of no known family is
read with Qwen3's.  Without a tokenizer the class cannot be told: it is
``unclassified`` and the texts are ``None``.  A turn shared by several
leaves is reported once, for the first leaf that packs it, as the session's
counts are.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ..algorithm.linearize import Decision
from ..algorithm.session import SessionResult
from ..errors import TokenizerError
from ..families import (
    REASONING_DROPPED,
    RETOKENIZED,
    TOOL_ARGS_RERENDERED,
    WHITESPACE_TRIMMED,
    FamilyProfile,
    family_for,
    family_named,
)
from ..tokenizer import TokenizerChoice, TokenText, load_decoder, resolve

__all__ = [
    "DRIFT_CLASSES",
    "FIRST_MESSAGE_DIFFERS",
    "OTHER",
    "REASONING_DROPPED",
    "REPLY_NOT_REPLAYED",
    "RETOKENIZED",
    "TOOL_ARGS_RERENDERED",
    "UNCLASSIFIED",
    "WHITESPACE_TRIMMED",
    "Divergence",
    "DriftClassCounter",
    "class_counts",
    "classify",
    "divergences",
    "drift_class_counter",
    "family_of",
]

#: The prompt is a strict prefix of the held tokens (the latest reply was not sent back).
REPLY_NOT_REPLAYED = "reply not replayed"
#: The prompt parts from the held tokens before its second message starts.
FIRST_MESSAGE_DIFFERS = "first message differs"
OTHER = "other"
#: No tokenizer: the texts, and so the class, are unknown.
UNCLASSIFIED = "unclassified"
#: The classes, in the order summaries list them.
DRIFT_CLASSES = (
    REASONING_DROPPED,
    RETOKENIZED,
    TOOL_ARGS_RERENDERED,
    WHITESPACE_TRIMMED,
    REPLY_NOT_REPLAYED,
    FIRST_MESSAGE_DIFFERS,
    OTHER,
    UNCLASSIFIED,
)

#: Tokens decoded before a divergence to classify it, and at most after it on the held side
#: (a fork in the prompt region can drop a whole long prompt; the default threshold's worth
#: of text tells the classes apart).
_BEFORE = 512
_AFTER = 1024

Ids = npt.NDArray[np.int32]


@dataclass(frozen=True, slots=True)
class Divergence:
    """One fork or realign: where the held tokens and the next prompt part."""

    leaf: int
    seq: int
    #: ``fork`` or ``realign``.
    kind: str
    #: The :class:`~tito_cli.algorithm.linearize.ForkCause` value for forks, ``None`` for realigns.
    cause: str | None
    #: Token index of the first divergence in the held tokens (the common prefix length).
    index: int
    #: First token index of the windows below.
    window_start: int
    #: Held tokens ``[window_start, index + window)``.
    held_ids: list[int]
    #: The turn's prompt ids over the same range.
    prompt_ids: list[int]
    #: One of :data:`DRIFT_CLASSES`.
    drift_class: str
    #: Held tokens the turn drops (``len(held) - index``).
    drift: int = 0
    #: Decoded, whitespace visible (``None`` without a tokenizer): ``[window_start, index)``,
    #: the same on both sides; then each side from ``index`` to the window's end.
    shared_text: str | None = None
    held_text: str | None = None
    prompt_text: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """JSON-able, with stable keys (``--json``)."""
        return {
            "leaf": self.leaf,
            "seq": self.seq,
            "kind": self.kind,
            "cause": self.cause,
            "index": self.index,
            "drift": self.drift,
            "class": self.drift_class,
            "window_start": self.window_start,
            "held_ids": self.held_ids,
            "prompt_ids": self.prompt_ids,
            "shared_text": self.shared_text,
            "held_text": self.held_text,
            "prompt_text": self.prompt_text,
        }


_FAMILIES: weakref.WeakKeyDictionary[TokenText, FamilyProfile] = weakref.WeakKeyDictionary()


def family_of(text: TokenText) -> FamilyProfile:
    """The model family whose markers classify drift in ``text``'s tokens (Qwen3's when none is recognised).

    Recognised from the tokenizer's vocabulary, else from the name the log records; once per decoder.
    """
    family = _FAMILIES.get(text)
    if family is None:
        family = _FAMILIES[text] = family_for(text.name, text.tokenizer) or family_named("qwen3")
    return family


def divergences(result: SessionResult, text: TokenText | None = None, window: int = 16) -> list[Divergence]:
    """Every fork and realign of ``result``, in the order the linearizer decided them."""
    decoder = text if text is not None and text.decodes else None
    family = family_of(decoder) if decoder is not None else None
    chains = [[n.turn for n in leaf.chain() if n.turn is not None] for leaf in result.tree.leaves()]
    seen: set[int] = set()
    found: list[Divergence] = []
    for decision in result.linearization.decisions:
        if decision.kind not in ("fork", "realign") or decision.seq in seen:
            continue
        seen.add(decision.seq)
        chain = chains[decision.leaf]
        position = next(i for i, t in enumerate(chain) if t.seq == decision.seq)
        before = chain[position - 1]  # a fork or realign always follows a held turn
        held = np.concatenate((before.prompt_ids, before.output_ids))
        found.append(_divergence(decision, held, chain[position].prompt_ids, decoder, window, family))
    return found


def class_counts(items: Iterable[Divergence]) -> dict[str, dict[str, int]]:
    """``{"fork": {class: n}, "realign": {class: n}}`` over ``items``, classes in :data:`DRIFT_CLASSES` order."""
    counts: dict[str, Counter[str]] = {"fork": Counter(), "realign": Counter()}
    for item in items:
        counts[item.kind][item.drift_class] += 1
    return {kind: {c: counter[c] for c in DRIFT_CLASSES if counter[c]} for kind, counter in counts.items()}


class DriftClassCounter:
    """A session's forks and realigns counted by class (``"fork: re-tokenized"``), for the rebuild summary.

    Picklable (it is sent to rebuild workers); the decoder is loaded once per
    process, decode-only (:func:`~tito_cli.tokenizer.load_decoder`), and only
    when a session has something to classify.
    """

    _decoders: ClassVar[dict[str, TokenText]] = {}

    def __init__(self, folder: str | Path, name: str | None = None) -> None:
        self.folder = str(folder)
        #: The name the log records (a hub id names the family when the vocabulary does not).
        self.name = name

    def __call__(self, result: SessionResult) -> dict[str, int]:
        if not (result.report.fork_total or result.report.realigns):
            return {}
        key = f"{self.name}\0{self.folder}"
        text = self._decoders.get(key)
        if text is None:
            text = self._decoders[key] = TokenText(load_decoder(Path(self.folder)), self.name)
        counts = Counter(f"{d.kind}: {d.drift_class}" for d in divergences(result, text))
        return dict(sorted(counts.items()))


def drift_class_counter(
    recorded: str | None, log_dirs: Iterable[Path] = (), choice: TokenizerChoice | None = None, *, strict: bool = False
) -> DriftClassCounter | None:
    """A counter for a log that records tokenizer ``recorded``; ``None`` when it cannot be found here.

    ``strict`` (the user named a tokenizer): a tokenizer that is not found is an error.
    """
    choice = choice or TokenizerChoice()
    name = choice.name_for(recorded)
    if name is None:
        return None
    try:
        return DriftClassCounter(resolve(name, log_dirs, choice), name)
    except TokenizerError:
        if strict:
            raise
        return None


def _divergence(
    decision: Decision, held: Ids, prompt: Ids, decoder: TokenText | None, window: int, family: FamilyProfile | None
) -> Divergence:
    index = decision.lcp
    start = max(0, index - window)
    end = index + window
    item = Divergence(
        leaf=decision.leaf,
        seq=decision.seq,
        kind=decision.kind,
        cause=decision.cause.value if decision.cause is not None else None,
        index=index,
        window_start=start,
        held_ids=[int(i) for i in held[start:end]],
        prompt_ids=[int(i) for i in prompt[start:end]],
        drift_class=UNCLASSIFIED,
        drift=decision.drift,
    )
    if decoder is None:
        return item
    return replace(
        item,
        drift_class=classify(held, prompt, index, decoder, family),
        shared_text=decoder.text(held[start:index].tolist()),
        held_text=decoder.text(held[index:end].tolist()),
        prompt_text=decoder.text(prompt[index:end].tolist()),
    )


def classify(held: Ids, prompt: Ids, index: int, decoder: TokenText, family: FamilyProfile | None = None) -> str:
    """The class of a divergence at ``index`` (the common prefix of ``held`` and ``prompt``).

    Compared as text from a little before ``index``: a special marker such as
    ``<think>`` may be several tokens in one vocabulary and one in another, so
    the point where the texts part can lie before the first differing token.
    ``family`` gives the markers (default: the decoder's, :func:`family_of`).
    """
    family = family or family_of(decoder)
    if index == len(prompt) < len(held):
        return REPLY_NOT_REPLAYED
    if _before_second_message(held, index, decoder, family):
        return FIRST_MESSAGE_DIFFERS
    start = max(0, index - _BEFORE)
    end = min(len(held), index + _AFTER)
    while True:
        # A cut inside a multi-byte character decodes to U+FFFD: compare the whole characters only.
        held_text = decoder.decode(held[start:end].tolist()).rstrip("\ufffd")
        # The prompt's version of the held tail: about as many tokens (canonical splits are fewer;
        # a re-rendering adds a few), so twice as many, and some, cover it.
        prompt_text = decoder.decode(prompt[start : index + 2 * (end - index) + 64].tolist())
        if prompt_text.startswith(held_text):
            return RETOKENIZED
        parted = _common_prefix(held_text, prompt_text)
        change = family.drift_change(held_text, prompt_text, parted)
        if change is not None or end == len(held) or family.tool_call_start(held_text, parted) is None:
            return change or OTHER
        # The texts part inside a tool call longer than the window (a whole file written): read all of it.
        end = len(held)


def _before_second_message(held: Ids, index: int, decoder: TokenText, family: FamilyProfile) -> bool:
    """Whether the ``index`` tokens both sides share hold at most one of the family's message starts."""
    if not family.message_starts or index > _AFTER:
        return False  # a first message longer than this is not read whole: the text classes decide
    shared = decoder.decode(held[:index].tolist())
    return sum(shared.count(marker) for marker in family.message_starts) <= 1


def _common_prefix(a: str, b: str) -> int:
    # Bisection on slice equality: a few comparisons in C instead of one Python step a character.
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
