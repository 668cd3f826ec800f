"""One session, start to finish: turns → tree → samples, plus what happened.

Pure: no I/O, no printing.  ``rebuild`` (many sessions, files) and
``inspect`` (one session, shown to a person) both call :func:`rebuild_session`,
so there is exactly one implementation of the algorithm.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from itertools import pairwise

from ..turns import SessionInfo, Turn
from .call_order import call_order_tree
from .linearize import Linearization, LinearizedSample, linearize
from .policy import ForkCause, Policy
from .router import route
from .tree import SessionTree

__all__ = ["NoSamples", "SessionReport", "SessionResult", "no_samples_cause", "rebuild_session", "seq_gaps"]


class NoSamples(str, Enum):
    """Why a valid session yields no sample (one decision; ``notes`` and ``tito stats`` word it)."""

    #: Every turn has an empty ``prompt_messages`` (skipped, docs/spec.md §3 step 1).
    ALL_SKIPPED = "all_skipped"
    #: Every packed turn's output is empty.
    EMPTY_OUTPUTS = "empty_outputs"
    #: Outputs exist, but none is trained after a first prompt (already trained elsewhere).
    NOTHING_TRAINED = "nothing_trained"


def no_samples_cause(tree: SessionTree, samples: Sequence[LinearizedSample]) -> NoSamples | None:
    """``None`` when the session has samples, else why it has none."""
    if samples:
        return None
    if not tree.turns:
        return NoSamples.ALL_SKIPPED
    if all(len(t.output_ids) == 0 for t in tree.turns):
        return NoSamples.EMPTY_OUTPUTS
    return NoSamples.NOTHING_TRAINED


@dataclass(slots=True)
class SessionReport:
    """Counts of what routing and linearization did to one session."""

    turns: int = 0
    #: Turns with an empty ``prompt_messages`` (no node, no turn index).
    skipped_turns: int = 0
    leaves: int = 0
    samples: int = 0
    #: Segments that produced no sample (nothing trained after the first prompt).
    dropped_segments: int = 0
    trained_tokens: int = 0
    #: Response-region tokens with loss 0 (prompt tails, reused outputs).
    context_tokens: int = 0
    #: Turns that forked (by cause: those the policy can give, see :meth:`for_policy`) or
    #: realigned; a turn shared by several leaves counts once.
    forks: dict[str, int] = field(
        default_factory=lambda: {c.value: 0 for c in ForkCause if c is not ForkCause.OUTPUT_TOO_LONG}
    )
    realigns: int = 0
    rewrite_merges: int = 0
    ambiguous_rewrites: int = 0
    #: Distinct turns trained somewhere, and turns that were never trained.
    turns_trained: int = 0
    turns_context_only: int = 0
    #: True when the session had no sessions row (reward 0.0).
    missing_sessions_row: bool = False
    #: Seqs absent between the session's first and last turn.  Allowed (seq
    #: only orders turns) but worth a note: turns may have been lost.
    missing_seqs: int = 0
    #: The missing seqs as inclusive ranges ``(first, last)``; per session only.
    seq_gaps: tuple[tuple[int, int], ...] = ()
    #: Forks and realigns by drift class (``"fork: reasoning dropped"``), when a rebuild
    #: was given a tokenizer to classify them with (``tito_cli.report.drift``); else empty.
    drift_classes: dict[str, int] = field(default_factory=dict)
    #: Samples left out because their first prompt is longer than ``max_sample_tokens`` (SPEC §8.7).
    left_out_samples: int = 0
    #: The cap they exceeded; per session only.
    max_sample_tokens: int | None = None

    #: Why the session has no samples (a :class:`NoSamples` value), ``None`` when it has some.
    no_samples: str | None = None

    @classmethod
    def for_policy(cls, policy: Policy) -> SessionReport:
        """An empty report counting the fork causes ``policy`` can give."""
        return cls(forks={c.value: 0 for c in policy.fork_causes})

    @property
    def fork_total(self) -> int:
        return sum(self.forks.values())

    def notes(self) -> list[str]:
        """Why a valid session yields no samples, and other things its user should know."""
        notes = []
        if self.no_samples is not None:
            if self.no_samples == NoSamples.ALL_SKIPPED:
                why = f"all {self.turns} turns have an empty prompt_messages (skipped, docs/spec.md §3 step 1)"
            else:
                why = (
                    f"no trained output token after the first prompt in any of {self.dropped_segments} "
                    "segments (empty outputs, or outputs already trained elsewhere)"
                )
            notes.append(f"no samples: {why}")
        if self.left_out_samples:
            notes.append(
                f"left out {self.left_out_samples} sample{'s' if self.left_out_samples > 1 else ''}: "
                f"first prompt longer than max_sample_tokens ({self.max_sample_tokens}, docs/spec.md §8.7)"
            )
        if self.seq_gaps:
            ranges = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in self.seq_gaps)
            notes.append(f"seq gaps: {self.missing_seqs} seqs missing ({ranges}); turns may have been lost")
        return notes

    def add(self, other: SessionReport) -> None:
        """Accumulate ``other`` into this report (corpus totals)."""
        for name in (
            "turns",
            "skipped_turns",
            "leaves",
            "samples",
            "dropped_segments",
            "trained_tokens",
            "context_tokens",
            "realigns",
            "rewrite_merges",
            "ambiguous_rewrites",
            "turns_trained",
            "turns_context_only",
            "missing_seqs",
            "left_out_samples",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for cause, count in other.forks.items():
            self.forks[cause] = self.forks.get(cause, 0) + count
        for name, count in other.drift_classes.items():
            self.drift_classes[name] = self.drift_classes.get(name, 0) + count


@dataclass(slots=True)
class SessionResult:
    session_id: str
    info: SessionInfo
    tree: SessionTree
    linearization: Linearization
    #: Per-sample reward, aligned with ``samples``.
    rewards: list[float]
    report: SessionReport
    #: The policy the session was rebuilt with.
    policy: Policy

    @property
    def samples(self) -> list[LinearizedSample]:
        return self.linearization.samples


def rebuild_session(session_id: str, turns: Sequence[Turn], info: SessionInfo | None, policy: Policy) -> SessionResult:
    """Route and linearize one session's valid turns (in ``seq`` order)."""
    info = info if info is not None else SessionInfo(finished=False)
    tree = route(turns, policy) if policy.routing == "messages" else call_order_tree(turns)
    lin = linearize(tree, policy)

    samples = lin.samples
    rewards = policy.rewards(info.reward, len(samples))

    gaps = seq_gaps([t.seq for t in turns])
    report = SessionReport.for_policy(policy)
    report.turns = len(turns)
    report.missing_seqs = sum(b - a + 1 for a, b in gaps)
    report.seq_gaps = tuple(gaps)
    report.skipped_turns = len(tree.skipped)
    report.leaves = len(tree.leaves())
    report.samples = len(samples)
    report.dropped_segments = lin.dropped_segments
    report.rewrite_merges = len(tree.merges)
    report.ambiguous_rewrites = len(tree.ambiguous_rewrites)
    report.missing_sessions_row = not info.finished
    if lin.left_out:
        report.left_out_samples = len(lin.left_out)
        report.max_sample_tokens = policy.max_sample_tokens
    cause = no_samples_cause(tree, samples)
    report.no_samples = cause.value if cause is not None else None
    for sample in samples:
        trained = int(sample.loss_mask.sum())
        report.trained_tokens += trained
        report.context_tokens += sample.response_length - trained
    # A turn shared by several leaves is packed once per leaf, always with the
    # same decision (the chain up to it is the same); count each turn once.
    first_decisions = lin.turn_decisions().values()
    kinds = Counter(d.kind for d in first_decisions)
    report.realigns = kinds["realign"]
    for decision in first_decisions:
        if decision.cause is not None:
            report.forks[decision.cause.value] += 1
    trained_seqs = {seq for s in samples for seq in s.trained_seqs}
    attached = [t.seq for t in tree.turns]
    report.turns_trained = len(trained_seqs)
    report.turns_context_only = len(attached) - len(trained_seqs)
    return SessionResult(session_id, info, tree, lin, rewards, report, policy)


def seq_gaps(seqs: Sequence[int]) -> list[tuple[int, int]]:
    """Inclusive ranges of seqs missing between consecutive ones (``seqs`` ascending, unique)."""
    return [(a + 1, b - 1) for a, b in pairwise(seqs) if b - a > 1]
