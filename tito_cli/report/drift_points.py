"""Divergences (:mod:`tito_cli.report.drift`) as JSON-able rows for ``tito view`` and ``inspect --drift``.

Each row adds what a reader needs beside the divergence itself: the
decision's wording and the sample the divergence shows in.
"""

from __future__ import annotations

from typing import Any

from ..algorithm.session import SessionResult
from .drift import Divergence
from .session_facts import short_decision

__all__ = ["drift_points"]


def _sample_of(result: SessionResult, leaf: int, seq: int) -> int | None:
    """The sample of ``leaf`` that packs turn ``seq`` (where its divergence shows, at the same index)."""
    for i, sample in enumerate(result.samples):
        if sample.leaf == leaf and seq in sample.seqs:
            return i
    return None


def drift_points(result: SessionResult, found: list[Divergence]) -> list[dict[str, Any]]:
    """The divergences as rows, each with its decision's wording and the sample it shows in."""
    prompt_lengths = {turn.seq: turn.prompt_length for turn in result.tree.turns}
    rows = []
    for d in sorted(found, key=lambda d: d.seq):  # in arrival order, as the turns are listed
        decision = {"kind": d.kind, "lcp": d.index, "drift": d.drift, "cause": d.cause}
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
                "held_length": d.index + d.drift,
                "prompt_length": prompt_lengths.get(d.seq, 0),
                "held_ids": d.held_ids,
                "prompt_ids": d.prompt_ids,
                "held_text": d.held_text,
                "prompt_text": d.prompt_text,
                "sample": _sample_of(result, d.leaf, d.seq),
            }
        )
    return rows
