"""Each sample's provenance per token (docs/spec.md §5): weight versions, and routed experts by prefix.

Weight versions follow the trained spans: a sample lists, for each turn it
trains, the version at the end of that call (slime's ``weight_versions``), and
the spans of trained positions each version generated.

Routed experts are assembled by prefix, never by position alone: row ``i`` of a
sample is the routing the engine computed with the sample's tokens ``[:i + 1]``
as its input, so it may come from a call only if that call's tokens agree with
the sample's up to and including position ``i``.  Every call of the session
offers the rows it stored; a position no call offers for the sample's prefix
leaves the sample incomplete (it is rejected, never filled with a guess).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .._arrow import common_prefix
from ..errors import InvalidSessionError
from ..turns import RoutedExperts, Turn
from .linearize import LinearizedSample

__all__ = ["ExpertsSource", "MissingRow", "sample_experts", "sample_versions", "stale", "turn_experts"]


def sample_versions(sample: LinearizedSample) -> tuple[list[str], list[dict[str, object]]] | None:
    """The sample's ``weight_versions`` (one per trained turn that recorded them) and ``weight_version_spans``.

    The spans are over the sample's absolute token positions, trained tokens only; ``None`` when no
    trained turn recorded a version.
    """
    versions: list[str] = []
    spans: list[dict[str, object]] = []
    for span in sample.spans:
        provenance = span.turn.provenance
        if not span.trained or span.end <= span.start or provenance is None or not provenance.weight_versions:
            continue
        versions.append(provenance.weight_versions[-1].version)
        for version in provenance.weight_versions:
            start = span.start + version.start
            end = min(span.start + version.end, span.end)
            if end <= start:
                continue
            if spans and spans[-1]["version"] == version.version and spans[-1]["end"] == start:
                spans[-1]["end"] = end  # one span while the version does not change
            else:
                spans.append({"version": version.version, "start": start, "end": end})
    if not versions:
        return None
    return versions, spans


def stale(sample: LinearizedSample) -> bool:
    """Whether more than one weight version generated the sample's trained tokens (an off-policy mix)."""
    versions = sample_versions(sample)
    return versions is not None and len({span["version"] for span in versions[1]}) > 1


@dataclass(frozen=True, slots=True)
class MissingRow:
    """The first position of a sample whose routed-experts row no call computed for its prefix."""

    position: int
    #: How many positions of the sample have no row.
    missing: int


class ExpertsSource:
    """A session's calls that stored routed experts: their tokens and rows, decompressed once, when first asked."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self._calls = [
            (turn, turn.provenance.routed_experts)
            for turn in turns
            if turn.provenance is not None and turn.provenance.routed_experts is not None
        ]
        self._loaded: list[tuple[npt.NDArray[np.int32], RoutedExperts, npt.NDArray[np.int32]]] | None = None

    @property
    def shape(self) -> tuple[int, int] | None:
        """``(layers, topk)`` of the session's rows (one for all its calls), ``None`` without any."""
        if not self._calls:
            return None
        experts = self._calls[0][1]
        return experts.layers, experts.topk

    def calls(self) -> list[tuple[npt.NDArray[np.int32], RoutedExperts, npt.NDArray[np.int32]]]:
        """Each call's tokens, stored rows and their values; :class:`InvalidSessionError` for rows that do not
        decompress to their shape (the session is rejected, naming the row)."""
        if self._loaded is None:
            self._loaded = []
            for turn, experts in self._calls:
                tokens = np.concatenate([turn.prompt_ids, turn.output_ids])
                self._loaded.append((tokens, experts, turn_experts(turn)))
        return self._loaded


def turn_experts(turn: Turn) -> npt.NDArray[np.int32]:
    """A turn's stored routed-experts rows, decompressed (:class:`InvalidSessionError` naming its row if they
    do not decompress to their shape)."""
    assert turn.provenance is not None and turn.provenance.routed_experts is not None
    try:
        return turn.provenance.routed_experts.array()
    except ValueError as exc:
        source = turn.source
        raise InvalidSessionError(
            f"seq {turn.seq}: {exc}", file=source.file if source else None, row=source.row if source else None
        ) from None


def sample_experts(tokens: npt.NDArray[np.int32], source: ExpertsSource) -> npt.NDArray[np.int32] | MissingRow:
    """The sample's routed experts, ``[len(tokens) - 1, layers, topk]``, or the first position none computed."""
    needed = max(len(tokens) - 1, 0)
    shape = source.shape
    if needed == 0:
        layers, topk = shape or (0, 0)
        return np.zeros((0, layers, topk), dtype=np.int32)
    if shape is None:
        return MissingRow(0, needed)
    rows = np.zeros((needed, *shape), dtype=np.int32)
    filled = np.zeros(needed, dtype=bool)
    for call_tokens, experts, values in source.calls():
        # Row p of the call holds for the sample when their tokens agree on [0, p].
        stop = min(experts.stop, common_prefix(call_tokens, tokens), needed)
        if stop <= experts.start:
            continue
        rows[experts.start : stop] = values[: stop - experts.start]
        filled[experts.start : stop] = True
    if not filled.all():
        return MissingRow(int(np.argmin(filled)), int(needed - filled.sum()))
    return rows
