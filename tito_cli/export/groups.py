"""GRPO group integrity: per ``group_index``, how many sessions and how many samples.

A trainer that normalizes rewards per group (slime reshapes them to
``(-1, n_samples_per_prompt)``) expects one sample per session.  A session
that forked into several samples, or one that yielded none, changes its
group's count; ``tito stats`` and ``tito export`` report those groups with
the expected and the actual counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GroupCounts", "GroupFact"]


@dataclass(slots=True)
class GroupFact:
    """One group's counts.  Only the sessions with other than one sample are named: a group of
    thousands of well-formed sessions costs a few numbers, not a dictionary entry per session."""

    group_index: int
    #: Sessions in the group, and their samples in all.
    session_count: int = 0
    samples: int = 0
    #: session id -> its samples, for the sessions with other than one sample, in the order they came.
    odd_sessions: dict[str, int] = field(default_factory=dict)
    #: The session counted last and its samples so far (a session's samples may come in several parts,
    #: one after the other); it joins ``odd_sessions`` when it turns out to have other than one.
    _last: str | None = None
    _last_samples: int = 0

    def add(self, session_id: str, samples: int) -> None:
        if session_id == self._last:
            self._last_samples += samples
            self.samples += samples
            if self._last_samples == 1:
                self.odd_sessions.pop(session_id, None)
            else:
                self.odd_sessions[session_id] = self._last_samples
            return
        self._last, self._last_samples = session_id, samples
        self.session_count += 1
        self.samples += samples
        if samples != 1:
            self.odd_sessions[session_id] = samples

    @property
    def expected_samples(self) -> int:
        """One sample per session, as ``n_samples_per_prompt`` assumes."""
        return self.session_count

    def to_dict(self) -> dict[str, Any]:
        return {
            "group_index": self.group_index,
            "sessions": self.session_count,
            "expected_samples": self.expected_samples,
            "samples": self.samples,
            "sessions_not_one_sample": dict(self.odd_sessions),
        }

    def describe(self) -> str:
        odd = ", ".join(
            f"{sid} forked into {n}" if n > 1 else f"{sid} has no sample" for sid, n in self.odd_sessions.items()
        )
        return (
            f"group {self.group_index}: {self.session_count} sessions, expected {self.expected_samples} "
            f"samples, got {self.samples} ({odd})"
        )


class GroupCounts:
    """Accumulates sessions' sample counts by group, one session at a time (sessions in session-id order)."""

    def __init__(self) -> None:
        self._groups: dict[int, GroupFact] = {}
        self.ungrouped_sessions = 0

    def add(self, session_id: str, group_index: int | None, samples: int) -> None:
        if group_index is None:
            self.ungrouped_sessions += 1
            return
        fact = self._groups.get(group_index)
        if fact is None:
            fact = self._groups[group_index] = GroupFact(group_index)
        fact.add(session_id, samples)

    def groups(self) -> list[GroupFact]:
        return [self._groups[g] for g in sorted(self._groups)]

    def mismatched(self) -> list[GroupFact]:
        """Groups whose sample count is not their session count."""
        return [g for g in self.groups() if g.samples != g.expected_samples]

    def sessions_per_group(self) -> Counter[int]:
        return Counter(g.session_count for g in self._groups.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "groups": len(self._groups),
            "ungrouped_sessions": self.ungrouped_sessions,
            "sessions_per_group": {str(n): c for n, c in sorted(self.sessions_per_group().items())},
            "mismatched": [g.to_dict() for g in self.mismatched()],
        }

    def size_warning(self) -> str | None:
        """A line when groups hold different numbers of sessions (one ``n_samples_per_prompt`` cannot fit all)."""
        sizes = self.sessions_per_group()
        if len(sizes) <= 1:
            return None
        listed = ", ".join(f"{n} in {c} group{'' if c == 1 else 's'}" for n, c in sorted(sizes.items()))
        return f"groups differ in size (sessions per group: {listed})"

    def warnings(self, limit: int = 10) -> list[str]:
        """The size line, then one line per group whose counts break ``n_samples_per_prompt`` (the first ``limit``)."""
        size = self.size_warning()
        lines = [size] if size else []
        bad = self.mismatched()
        lines.extend(g.describe() for g in bad[:limit])
        if len(bad) > limit:
            lines.append(f"… and {len(bad) - limit} more groups whose sample count differs from their session count")
        return lines


class RolloutIds:
    """slime's ``rollout_id`` per session (docs/spec.md §8.8: the session's, else its ``index``), checked.

    slime gives each sample without one a fresh id, so a session's samples
    no longer share one; two sessions with the same id share slime's
    per-rollout loss denominator.  Sessions arrive one at a time; kept per
    session: its id number only.
    """

    def __init__(self) -> None:
        self.sessions = 0
        self.missing = 0
        self.first_missing: str | None = None
        self._seen: set[int] = set()
        #: Sessions whose id an earlier session holds already, and the first such (id, session).
        self.repeated = 0
        self.first_repeated: tuple[int, str] | None = None

    def add(self, session_id: str, rollout_id: int | None) -> None:
        self.sessions += 1
        if rollout_id is None:
            self.missing += 1
            self.first_missing = self.first_missing or session_id
        elif rollout_id in self._seen:
            self.repeated += 1
            self.first_repeated = self.first_repeated or (rollout_id, session_id)
        else:
            self._seen.add(rollout_id)

    def line(self) -> str:
        """The check in one line, for the export summary."""
        if not self.missing and not self.repeated:
            return f"rollout ids: all {self.sessions:,} sessions have their own"
        parts = []
        if self.missing:
            sessions = "session" if self.missing == 1 else "sessions"
            parts.append(
                f"{self.missing:,} {sessions} without one (e.g. {self.first_missing!r}: slime gives each of their "
                "samples a fresh id)"
            )
        if self.first_repeated is not None:
            rid, sid = self.first_repeated
            sessions = "session" if self.repeated == 1 else "sessions"
            parts.append(
                f"{self.repeated:,} {sessions} whose id an earlier session holds (e.g. {rid}, again in {sid!r}: "
                "slime merges their per-rollout loss denominators)"
            )
        return "rollout ids: " + "; ".join(parts)
