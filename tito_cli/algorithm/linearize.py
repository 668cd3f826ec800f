"""Linearization (SPEC §4): from a routing tree to token-level samples.

Each leaf's chain of generated turns is packed into *segments*.  A turn whose
prompt extends the segment's tokens continues it; a short drift inside the
latest response is realigned (the tokens are cut back to the common prefix
and the prompt's version wins); any other drift closes the segment and opens
a fresh one (a *fork*).  A turn is trained in the first segment that packs it
and is plain context everywhere after, so no output is trained twice.

The segment never copies tokens while packing: after absorbing a turn its
tokens are exactly that turn's ``prompt_ids + output_ids`` (the prompt agrees
with the old tokens up to the common prefix, and replaces the rest).  So a
segment only remembers the last turn and its response spans, and the token,
loss-mask and logprob arrays are built once, when the segment closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import numpy.typing as npt

from .._arrow import same_values
from ..turns import Turn
from .policy import Policy
from .router import Node, SessionTree

__all__ = ["Decision", "ForkCause", "Linearization", "LinearizedSample", "Span", "linearize"]


class ForkCause(str, Enum):
    """Why a turn could not continue the segment holding its chain."""

    #: The prompt diverges inside the segment's first prompt.
    PROMPT_REGION = "prompt_region"
    #: The prompt diverges after the first prompt but before the latest response.
    BEFORE_LATEST_RESPONSE = "before_latest_response"
    #: The drift lies in the latest response but is not shorter than the threshold.
    DRIFT_TOO_LONG = "drift_too_long"


@dataclass(frozen=True, slots=True)
class Decision:
    """How one turn's prompt related to the tokens held before it, in one leaf's pass."""

    leaf: int
    seq: int
    #: ``clean``, ``realign`` or ``fork`` (``start`` for a leaf's first turn).
    kind: str
    #: Common prefix with the held tokens, and how many held tokens it drops.
    lcp: int
    drift: int
    cause: ForkCause | None
    trained: bool


@dataclass(slots=True)
class Span:
    """Output tokens of one turn inside a segment: positions ``[start, end)``."""

    start: int
    end: int
    turn: Turn
    trained: bool


@dataclass(slots=True)
class LinearizedSample:
    tokens: npt.NDArray[np.int32]
    response_length: int
    loss_mask: npt.NDArray[np.int8]
    rollout_log_probs: npt.NDArray[np.float32]
    #: Provenance: which leaf and segment, the turns packed and those trained.
    leaf: int
    segment: int
    seqs: list[int]
    trained_seqs: list[int]
    #: Set when this sample begins where a drift forced a new segment.
    fork: ForkCause | None
    spans: list[Span] = field(default_factory=list)
    first_prompt_length: int = 0


@dataclass(slots=True)
class Linearization:
    samples: list[LinearizedSample]
    decisions: list[Decision]
    #: Segments dropped: no tokens, or no trained token after the first prompt.
    dropped_segments: int

    def turn_decisions(self) -> dict[int, Decision]:
        """The decision for each packed turn (by seq), from the first leaf that packed it.

        Every leaf through a generated node packs the same chain up to it, from
        an empty segment, so all leaves reach the same decision there; only
        ``trained`` differs (a turn is trained by its first leaf).  Counts,
        ``inspect`` and ``view`` all read a turn's decision from here.
        """
        first: dict[int, Decision] = {}
        for d in self.decisions:
            first.setdefault(d.seq, d)
        return first


def common_prefix_length(a: npt.NDArray[np.int32], b: npt.NDArray[np.int32]) -> int:
    n = min(len(a), len(b))
    # Usually all of the shorter one is shared (a clean turn): one memcmp says so.
    if same_values(a[:n], b[:n]):
        return n
    return int((a[:n] != b[:n]).argmax())


class _Segment:
    __slots__ = ("first_prompt_length", "fork", "last", "seqs", "spans", "trained_seqs")

    def __init__(self, fork: ForkCause | None) -> None:
        self.last: Turn | None = None
        self.spans: list[Span] = []
        self.first_prompt_length = 0
        self.seqs: list[int] = []
        self.trained_seqs: list[int] = []
        self.fork = fork

    def __len__(self) -> int:
        if self.last is None:
            return 0
        return len(self.last.prompt_ids) + len(self.last.output_ids)

    def common_prefix(self, prompt: npt.NDArray[np.int32]) -> int:
        if self.last is None:
            return 0
        held_prompt = self.last.prompt_ids
        lcp = common_prefix_length(held_prompt, prompt)
        if lcp == len(held_prompt):
            lcp += common_prefix_length(self.last.output_ids, prompt[len(held_prompt) :])
        return lcp

    def absorb(self, turn: Turn, lcp: int, trained: bool) -> None:
        if self.spans and self.spans[-1].end > lcp:
            # Realign: the cut falls inside the latest response; what survives keeps its mask.
            self.spans[-1].end = lcp
        if self.last is None:
            self.first_prompt_length = len(turn.prompt_ids)
        start = len(turn.prompt_ids)
        self.spans.append(Span(start, start + len(turn.output_ids), turn, trained))
        self.last = turn
        self.seqs.append(turn.seq)
        if trained:
            self.trained_seqs.append(turn.seq)

    def close(self, leaf: int, segment: int) -> LinearizedSample | None:
        last = self.last
        if last is None:
            return None
        trained = [s for s in self.spans if s.trained and s.end > s.start]
        if not trained:
            return None
        tokens = np.concatenate((last.prompt_ids, last.output_ids)).astype(np.int32, copy=False)
        offset = self.first_prompt_length
        response_length = len(tokens) - offset
        loss_mask = np.zeros(response_length, dtype=np.int8)
        logprobs = np.zeros(response_length, dtype=np.float32)
        for span in trained:
            lo, hi = span.start - offset, span.end - offset
            loss_mask[lo:hi] = 1
            recorded = span.turn.output_logprobs
            if recorded is not None:
                logprobs[lo:hi] = recorded[: hi - lo]
        return LinearizedSample(
            tokens=tokens,
            response_length=response_length,
            loss_mask=loss_mask,
            rollout_log_probs=logprobs,
            leaf=leaf,
            segment=segment,
            seqs=self.seqs,
            trained_seqs=self.trained_seqs,
            fork=self.fork,
            spans=self.spans,
            first_prompt_length=offset,
        )


def linearize(tree: SessionTree, policy: Policy) -> Linearization:
    """Pack every leaf's chain into segments and turn the segments into samples."""
    threshold = policy.fork_threshold
    claimed: set[int] = set()  # id() of generated nodes already trained
    samples: list[LinearizedSample] = []
    decisions: list[Decision] = []
    dropped = 0

    def emit(segment: _Segment, leaf: int, position: int) -> int:
        nonlocal dropped
        sample = segment.close(leaf, position)
        if sample is None:
            dropped += 1
            return position
        samples.append(sample)
        return position + 1

    for leaf_index, leaf in enumerate(tree.leaves()):
        segment = _Segment(fork=None)
        position = 0
        generated: list[Node] = [n for n in leaf.chain() if n.turn is not None]
        for node in generated:
            turn = node.turn
            assert turn is not None
            prompt = turn.prompt_ids
            lcp = segment.common_prefix(prompt)
            drift = len(segment) - lcp
            cause = _fork_cause(segment, lcp, drift, threshold)
            decided_lcp, decided_drift = lcp, drift
            if cause is not None:
                position = emit(segment, leaf_index, position)
                segment = _Segment(fork=cause)
                lcp = 0
            trained = id(node) not in claimed
            claimed.add(id(node))
            if cause is not None:
                kind = "fork"
            elif segment.last is None:
                kind = "start"
            else:
                kind = "realign" if drift else "clean"
            decisions.append(Decision(leaf_index, turn.seq, kind, decided_lcp, decided_drift, cause, trained))
            segment.absorb(turn, lcp, trained)
        emit(segment, leaf_index, position)
    return Linearization(samples=samples, decisions=decisions, dropped_segments=dropped)


def _fork_cause(segment: _Segment, lcp: int, drift: int, threshold: int) -> ForkCause | None:
    """``None`` when the segment can absorb the turn, else why it cannot (SPEC §4 step 2)."""
    if drift == 0:
        return None
    if not segment.spans or lcp < segment.first_prompt_length:
        return ForkCause.PROMPT_REGION
    if lcp < segment.spans[-1].start:
        return ForkCause.BEFORE_LATEST_RESPONSE
    if threshold > 0 and drift < threshold:
        return None
    return ForkCause.DRIFT_TOO_LONG
