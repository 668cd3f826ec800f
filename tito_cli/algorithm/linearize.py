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

import numpy as np
import numpy.typing as npt

from .._arrow import common_prefix
from ..turns import Turn
from .policy import ForkCause, Policy
from .tree import Node, SessionTree

__all__ = ["Decision", "ForkCause", "Linearization", "LinearizedSample", "Span", "linearize"]


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
    #: The policy's per-leaf flags (SPEC §8.6), or ``None`` when it sets none.
    flags: dict[str, bool] | None = None
    #: Where ``max_sample_tokens`` cut the tokens (SPEC §8.7); ``None`` when nothing was cut.
    cut_at: int | None = None
    #: ``[len(tokens) - 1, layers, topk]`` under ``rebuild --routed-experts`` (docs/spec.md §5).
    routed_experts: npt.NDArray[np.int32] | None = None


@dataclass(slots=True)
class Linearization:
    samples: list[LinearizedSample]
    decisions: list[Decision]
    #: Segments dropped: no tokens, or no trained token after the first prompt.
    dropped_segments: int
    #: Samples left out by ``max_sample_tokens`` (SPEC §8.7): (leaf, first prompt length),
    #: in emission order.
    left_out: list[tuple[int, int]] = field(default_factory=list)

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
    return common_prefix(a, b)


def _common_prefix_of_slices(slices: list[npt.NDArray[np.int32]], ids: npt.NDArray[np.int32]) -> int:
    """The common prefix of ``ids`` and the concatenation of ``slices``."""
    shared = 0
    for piece in slices:
        length = common_prefix_length(piece, ids[shared:])
        shared += length
        if length < len(piece):
            break
    return shared


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
        return self.last.prompt_length + len(self.last.output_ids)

    def held_slices(self, start: int) -> list[npt.NDArray[np.int32]]:
        """The held tokens from ``start`` on, as views of the arrays they are made of (nothing built)."""
        last = self.last
        assert last is not None
        held_prompt = last.prompt_length
        return [*last.prompt_slices(start, held_prompt), last.output_ids[max(start - held_prompt, 0) :]]

    def common_prefix(self, turn: Turn, use_deltas: bool = True) -> int:
        """The common prefix of the held tokens (the last turn's prompt + output) and ``turn``'s prompt.

        With ``use_deltas``, a turn the reader rebuilt from the held turn
        (format 2, docs/spec.md §9: ``turn.base``) is known to share its first
        ``n`` ids with it, copied from it: only its ids after them are
        compared, and neither prompt is built (a delta turn's prompt is built
        only when asked for).
        """
        last = self.last
        if last is None:
            return 0
        if use_deltas and turn.base is not None and turn.base[0] is last:
            start = turn.base[1]
            skip = start - last.prompt_length
            if skip >= 0:  # the common case: all of the held prompt is shared, and the output's start
                return start + common_prefix_length(last.output_ids[skip:], turn.new_prompt_ids)
            return start + _common_prefix_of_slices(self.held_slices(start), turn.new_prompt_ids)
        return _common_prefix_of_slices(self.held_slices(0), turn.prompt_ids)

    def absorb(self, turn: Turn, lcp: int, trained: bool, policy: Policy) -> None:
        if self.spans and self.spans[-1].end > lcp:
            # Realign: the cut falls inside the latest response; the policy says where its mask ends.
            last = self.spans[-1]
            last.end = policy.realign_cut(last.start, lcp)
        if self.last is None:
            self.first_prompt_length = turn.prompt_length
        start = turn.prompt_length
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
        # One copy of the held tokens, from the arrays a delta turn's prompt is made of.
        tokens = np.concatenate(self.held_slices(0)).astype(np.int32, copy=False)
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


def linearize(tree: SessionTree, policy: Policy, *, use_deltas: bool = True) -> Linearization:
    """Pack every leaf's chain into segments and turn the segments into samples.

    ``use_deltas=False`` compares every prompt with the held tokens in full,
    even where the reader knows they share a prefix (the same samples; for tests).
    """
    claimed: set[int] = set()  # id() of generated nodes already trained
    samples: list[LinearizedSample] = []
    decisions: list[Decision] = []
    left_out: list[tuple[int, int]] = []
    dropped = 0
    cap = policy.max_sample_tokens
    flags: dict[str, bool] | None = None

    def emit(segment: _Segment, leaf: int, position: int) -> int:
        nonlocal dropped
        sample = segment.close(leaf, position)
        if sample is None:
            dropped += 1
            return position
        if cap is not None and len(sample.tokens) > cap:
            # The cut comes after the keep rule above (SPEC §8.7).
            if sample.first_prompt_length > cap:
                left_out.append((leaf, sample.first_prompt_length))
                return position
            sample = _cut(sample, cap)
        sample.flags = flags
        samples.append(sample)
        return position + 1

    for leaf_index, leaf in enumerate(tree.leaves()):
        segment = _Segment(fork=None)
        position = 0
        generated: list[Node] = [n for n in leaf.chain() if n.turn is not None]
        flags = policy.sample_flags([n.turn for n in generated if n.turn is not None])
        for node in generated:
            turn = node.turn
            assert turn is not None
            lcp = segment.common_prefix(turn, use_deltas)
            drift = len(segment) - lcp
            last_start = segment.spans[-1].start if segment.spans else None
            cause = policy.fork_cause(lcp, drift, segment.first_prompt_length, last_start, turn)
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
            segment.absorb(turn, lcp, trained, policy)
        emit(segment, leaf_index, position)
    return Linearization(samples=samples, decisions=decisions, dropped_segments=dropped, left_out=left_out)


def _cut(sample: LinearizedSample, cap: int) -> LinearizedSample:
    """``sample`` cut to its first ``cap`` tokens (``cap`` >= its first prompt), its spans clipped."""
    response_length = cap - sample.first_prompt_length
    sample.tokens = sample.tokens[:cap]
    sample.response_length = response_length
    sample.loss_mask = sample.loss_mask[:response_length]
    sample.rollout_log_probs = sample.rollout_log_probs[:response_length]
    sample.spans = [
        Span(min(span.start, cap), min(span.end, cap), span.turn, span.trained) for span in sample.spans
    ]
    sample.cut_at = cap
    return sample
