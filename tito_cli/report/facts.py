"""What ``tito ls`` and ``tito stats`` report: per-session rows and corpus distributions.

Both consume :meth:`Corpus.results` (the same rebuild ``tito rebuild``
runs), one session at a time, so memory holds rows and turn lengths, never
samples.  Rows are plain dicts of JSON values: the listing, the filter
language and ``--json`` all use the same field names.
"""

from __future__ import annotations

import heapq
import math
import re
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..algorithm.policy import Policy, default_policy
from ..algorithm.session import SessionReport, SessionResult
from ..export.groups import GroupCounts
from ..run.corpus import UNFINISHED_REASON
from ..tokenizer import TokenText
from ..turns import Reject
from .drift import DRIFT_CLASSES, divergences, family_of
from .filter import FilterError
from .session_facts import NO_SAMPLES_REASONS, capture_history

__all__ = [
    "FIELDS",
    "CorpusStats",
    "corpus_stats",
    "percentiles",
    "select_rows",
    "session_row",
    "sort_rows",
    "zero_sample_reason",
]

#: The fields of a session row, in listing order, with what they mean (shown by ``tito ls --help``).
FIELDS: dict[str, str] = {
    "session": "session id",
    "turns": "turns in the log (skipped ones included)",
    "leaves": "leaves of the routing tree",
    "samples": "samples rebuilt",
    "trained": "trained tokens (loss 1)",
    "context": "context tokens in response regions (loss 0)",
    "forks": "forks, all causes",
    "realigns": "realigns",
    "merges": "rewrite merges",
    "reward": "the session's reward",
    "unfinished": "true for a session without a sessions row (its harness did not finish it)",
    "rejected": "why the session was rejected (null when it was not)",
}


def session_row(item: SessionResult | Reject) -> dict[str, Any]:
    """One row of ``tito ls``; a rejected session has null counts and a reason."""
    if isinstance(item, Reject):
        row: dict[str, Any] = dict.fromkeys(FIELDS)
        row["session"] = item.session_id
        row["unfinished"] = item.reason == UNFINISHED_REASON
        row["rejected"] = item.reason
        row["file"] = item.file
        row["row"] = item.row
        return row
    r = item.report
    # A session that recorded provenance (docs/spec.md §2) also says how many samples mix weight
    # versions and how many auxiliary calls it made; other rows read as before.
    provenance = {"stale": r.stale_samples, "auxiliary": r.auxiliary_calls} if r.provenance_turns else {}
    return {
        "session": item.session_id,
        "turns": r.turns,
        "leaves": r.leaves,
        "samples": r.samples,
        "trained": r.trained_tokens,
        "context": r.context_tokens,
        "forks": r.fork_total,
        "realigns": r.realigns,
        "merges": r.rewrite_merges,
        "reward": item.info.reward,
        "unfinished": not item.info.finished,
        "rejected": None,
        "file": None,
        "row": None,
        **provenance,
    }


def sort_rows(rows: list[dict[str, Any]], key: str, descending: bool = False) -> list[dict[str, Any]]:
    """Sort by one field; nulls (rejected sessions) always last, ties by session id."""
    if key not in FIELDS:
        raise FilterError(f"cannot sort by {key!r}; fields: {', '.join(FIELDS)}")
    present = [r for r in rows if r[key] is not None]
    missing = [r for r in rows if r[key] is None]
    present.sort(key=lambda r: r["session"])
    present.sort(key=lambda r: r[key], reverse=descending)
    return present + sorted(missing, key=lambda r: r["session"])


class _RowOrder:
    """A row's place in :func:`sort_rows`' order: non-null values first, by value, ties and nulls by session."""

    __slots__ = ("descending", "missing", "session", "value")

    def __init__(self, row: dict[str, Any], key: str, descending: bool) -> None:
        self.value = row[key]
        self.missing = self.value is None
        self.session = row["session"]
        self.descending = descending

    def __lt__(self, other: _RowOrder) -> bool:
        if self.missing != other.missing:
            return other.missing
        if not self.missing and self.value != other.value:
            return bool(self.value > other.value) if self.descending else bool(self.value < other.value)
        return bool(self.session < other.session)


def select_rows(
    rows: Iterable[dict[str, Any]], key: str, descending: bool = False, limit: int | None = None
) -> tuple[list[dict[str, Any]], int]:
    """The first ``limit`` rows in :func:`sort_rows`' order (all without a limit), and how many rows there were.

    With a limit, only that many rows are held at a time (a heap), however many
    sessions the log has.
    """
    if key not in FIELDS:
        raise FilterError(f"cannot sort by {key!r}; fields: {', '.join(FIELDS)}")
    count = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal count
        for row in rows:
            count += 1
            yield row

    if limit is None:
        everything = list(counted())
        return sort_rows(everything, key, descending), count
    chosen = heapq.nsmallest(limit, counted(), key=lambda row: _RowOrder(row, key, descending))
    return chosen, count


# -- corpus statistics --------------------------------------------------------


def percentiles(values: Iterable[int], points: Iterable[int] = (50, 90, 99)) -> dict[str, int | None]:
    """Nearest-rank percentiles plus the maximum: integers, the same on every machine."""
    if isinstance(values, array) and values.typecode == "q":
        data = np.sort(np.frombuffer(values, dtype=np.int64)) if len(values) else np.zeros(0, dtype=np.int64)
    else:
        data = np.sort(np.fromiter(values, dtype=np.int64))
    out: dict[str, int | None] = {}
    for p in points:
        out[f"p{p}"] = int(data[max(0, math.ceil(p / 100 * len(data)) - 1)]) if len(data) else None
    out["max"] = int(data[-1]) if len(data) else None
    return out


def zero_sample_reason(result: SessionResult) -> str:
    """Why a rebuilt session gave no sample (the decision the rebuild made, as ``tito stats`` words it)."""
    cause = result.report.no_samples
    if cause is None:
        raise ValueError(f"session {result.session_id} has samples")
    return NO_SAMPLES_REASONS[cause]


def _reason_kind(reason: str) -> str:
    """A reject reason without its particulars (counts, values), so like reasons group together."""
    reason = re.sub(r"\s*\([^)]*\)", "", reason)
    return re.sub(r"\d+", "N", reason).strip()


@dataclass(slots=True)
class CorpusStats:
    #: The policy the sessions were rebuilt with (its causes head the fork counts).
    policy: Policy = field(default_factory=default_policy)
    sessions: int = 0
    rebuilt: int = 0
    totals: SessionReport = field(default_factory=SessionReport)
    samples_per_session: Counter[int] = field(default_factory=Counter)
    sessions_with_forks: int = 0
    sessions_with_realigns: int = 0
    sessions_without_row: int = 0
    #: The first few sessions rebuilt without a sessions row.
    without_row_examples: list[str] = field(default_factory=list)
    rejected: int = 0
    #: reason -> [count, first few session ids]; rejected sessions are listed by reject reason.
    zero_samples: dict[str, list[Any]] = field(default_factory=dict)
    #: Per turn and per session: machine integers (8 bytes each), not a list of Python ints.
    prompt_lengths: array[int] = field(default_factory=lambda: array("q"))
    output_lengths: array[int] = field(default_factory=lambda: array("q"))
    turns_per_session: array[int] = field(default_factory=lambda: array("q"))
    #: Sessions and samples per ``group_index`` (GRPO group integrity).
    groups: GroupCounts = field(default_factory=GroupCounts)
    #: Forks and realigns by drift class (``report/drift.py``), and whether they were decoded.
    drift_classes: dict[str, Counter[str]] = field(
        default_factory=lambda: {"fork": Counter(), "realign": Counter()}
    )
    decoded: bool = False
    #: The model family whose markers classified the drift (``None`` without a tokenizer).
    family: str | None = None
    #: Turns by how tito serve built their prompt (``canonical``, ``rendered: <reason>``); empty
    #: unless the log was captured with ``--history canonical``.
    capture_history: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        t = self.totals
        response = t.trained_tokens + t.context_tokens
        turns = max(t.turns, 1)
        counts = sorted(self.samples_per_session.items())
        return {
            "policy": self.policy.describe(),
            "sessions": self.sessions,
            "rebuilt": self.rebuilt,
            "rejected": self.rejected,
            "turns": t.turns,
            "skipped_turns": t.skipped_turns,
            "samples": t.samples,
            "samples_per_session": {
                **percentiles(n for n, c in counts for _ in range(c)),
                "histogram": {str(n): c for n, c in counts},
            },
            "tokens": {
                "trained": t.trained_tokens,
                "context": t.context_tokens,
                "trained_share": round(t.trained_tokens / response, 4) if response else None,
            },
            "forks": {
                "total": t.fork_total,
                "by_cause": {c.value: t.forks.get(c.value, 0) for c in self.policy.fork_causes},
                "per_100_turns": round(100 * t.fork_total / turns, 2),
                "sessions": self.sessions_with_forks,
            },
            "realigns": {
                "total": t.realigns,
                "per_100_turns": round(100 * t.realigns / turns, 2),
                "sessions": self.sessions_with_realigns,
            },
            "drift_classes": {
                "decoded": self.decoded,
                "family": self.family,
                **{
                    f"{kind}s": {c: counter[c] for c in DRIFT_CLASSES}
                    for kind, counter in self.drift_classes.items()
                },
            },
            "rewrite_merges": t.rewrite_merges,
            "ambiguous_rewrites": t.ambiguous_rewrites,
            "left_out_samples": t.left_out_samples,
            "sessions_without_sessions_row": self.sessions_without_row,
            "sessions_without_sessions_row_examples": self.without_row_examples,
            "zero_sample_sessions": {
                reason: {"sessions": count, "examples": examples}
                for reason, (count, examples) in sorted(self.zero_samples.items())
            },
            "turns_per_session": percentiles(self.turns_per_session),
            "prompt_tokens": percentiles(self.prompt_lengths),
            "output_tokens": percentiles(self.output_lengths),
            "groups": self.groups.to_dict(),
            **({"capture_history": self._capture_history()} if self.capture_history else {}),
            **(
                {
                    "provenance": {
                        "turns": t.provenance_turns,
                        "auxiliary_calls": t.auxiliary_calls,
                        "stale_samples": t.stale_samples,
                    }
                }
                if t.provenance_turns
                else {}
            ),
        }

    def _capture_history(self) -> dict[str, Any]:
        """Continued turns, and rendered ones by reason (docs/spec.md §11.3)."""
        counts = self.capture_history
        rendered = {k.partition(": ")[2] or "unspecified": n for k, n in counts.items() if k != "canonical"}
        return {
            "canonical": counts["canonical"],
            "rendered": sum(rendered.values()),
            "rendered_by_reason": dict(sorted(rendered.items())),
        }


def _note(table: dict[str, list[Any]], reason: str, session_id: str) -> None:
    entry = table.setdefault(reason, [0, []])
    entry[0] += 1
    if len(entry[1]) < 3:
        entry[1].append(session_id)


def corpus_stats(
    items: Iterable[SessionResult | Reject], policy: Policy | None = None, text: TokenText | None = None
) -> CorpusStats:
    """Accumulate statistics over :meth:`Corpus.results` (rebuilt under ``policy``), one session at a time.

    With a decoding ``text``, forks and realigns are counted by drift class;
    without one they are all ``unclassified``.
    """
    policy = policy or default_policy()
    decoded = text is not None and text.decodes
    stats = CorpusStats(policy=policy, totals=SessionReport.for_policy(policy), decoded=decoded)
    if text is not None and decoded:
        stats.family = family_of(text).name
    for item in items:
        stats.sessions += 1
        if isinstance(item, Reject):
            stats.rejected += 1
            _note(stats.zero_samples, "rejected: " + _reason_kind(item.reason), item.session_id)
            continue
        r = item.report
        stats.rebuilt += 1
        stats.totals.add(r)
        stats.samples_per_session[r.samples] += 1
        stats.sessions_with_forks += r.fork_total > 0
        stats.sessions_with_realigns += r.realigns > 0
        stats.sessions_without_row += r.missing_sessions_row
        if r.missing_sessions_row and len(stats.without_row_examples) < 3:
            stats.without_row_examples.append(item.session_id)
        stats.turns_per_session.append(r.turns)
        stats.groups.add(item.session_id, item.info.group_index, len(item.samples))
        if not item.samples:
            _note(stats.zero_samples, zero_sample_reason(item), item.session_id)
        if r.fork_total or r.realigns:
            for d in divergences(item, text):
                stats.drift_classes[d.kind][d.drift_class] += 1
        for turn in item.tree.turns:
            stats.prompt_lengths.append(turn.prompt_length)
            stats.output_lengths.append(len(turn.output_ids))
            history = capture_history(turn)
            if history is not None:
                stats.capture_history[history] += 1
    return stats
