"""Divergences (:mod:`tito_cli.report.drift`) as points for ``tito view`` and ``inspect --drift``.

Each point adds what a reader needs beside the divergence itself: the
decision's wording and the sample the divergence shows in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..algorithm.session import SessionResult
from .drift import Divergence
from .session_facts import short_decision

__all__ = ["DriftPoint", "decision_label", "drift_points"]


def decision_label(d: Divergence) -> str:
    """The divergence's decision in a few words, as the turns list it: ``fork: prompt region at 12 (-300)``."""
    return short_decision({"kind": d.kind, "lcp": d.index, "drift": d.drift, "cause": d.cause})


@dataclass(frozen=True, slots=True)
class DriftPoint:
    """One divergence, with the sample it shows in and the length of its turn's prompt."""

    divergence: Divergence
    #: The sample of the divergence's leaf that packs its turn (``None``: no sample does).
    sample: int | None
    prompt_length: int

    @property
    def label(self) -> str:
        return decision_label(self.divergence)

    @property
    def held_length(self) -> int:
        """How many tokens were held before the turn (its prompt keeps ``index`` of them)."""
        return self.divergence.index + self.divergence.drift

    def as_dict(self) -> dict[str, Any]:
        """JSON-able, with stable keys (``inspect --drift --json``, the view page's data)."""
        d = self.divergence
        return {
            "seq": d.seq,
            "leaf": d.leaf,
            "kind": d.kind,
            "cause": d.cause,
            "label": self.label,
            "drift_class": d.drift_class,
            "index": d.index,
            "window_start": d.window_start,
            "held_length": self.held_length,
            "prompt_length": self.prompt_length,
            "held_ids": d.held_ids,
            "prompt_ids": d.prompt_ids,
            "held_text": d.held_text,
            "prompt_text": d.prompt_text,
            "sample": self.sample,
        }


def _sample_of(result: SessionResult, leaf: int, seq: int) -> int | None:
    """The sample of ``leaf`` that packs turn ``seq`` (where its divergence shows, at the same index)."""
    for i, sample in enumerate(result.samples):
        if sample.leaf == leaf and seq in sample.seqs:
            return i
    return None


def drift_points(result: SessionResult, found: Sequence[Divergence]) -> list[DriftPoint]:
    """The divergences as points, in arrival order (as the turns are listed)."""
    prompt_lengths = {turn.seq: turn.prompt_length for turn in result.tree.turns}
    return [
        DriftPoint(d, _sample_of(result, d.leaf, d.seq), prompt_lengths.get(d.seq, 0))
        for d in sorted(found, key=lambda d: d.seq)
    ]
