"""``rebuild``: a turn log in, a samples file (or a trainer's format) and a rejects report out.

This is the library function behind ``tito rebuild``; it never prints.
Progress reaches the caller through ``progress(done, total)`` (sessions).
It is the one orchestration of a rebuild, whichever runner rebuilds the
sessions (run/runner.py: this machine's processes, or Ray): the outputs are
checked, a killed run's temporaries swept and the sink opened (run/output.py),
each session's table handed to the sink in session-id order, and the sink's
files and the rejects report published together.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .._targets import writing
from ..algorithm.policy import Policy, default_policy
from ..algorithm.session import SessionReport
from ..errors import OutputError
from ..export.base import Sink, SinkContext
from ..export.formats import format_options
from ..export.rejects import rejects_path
from ..read.files import check_sessions_given, discover_files, require_logs
from ..read.sessions import SessionsTable
from ..turns import Reject
from .corpus import SessionFacts, Unfinished
from .output import RunOutput
from .runner import RUNNERS, OpenedLog, Runner

__all__ = [
    "DriftCounter",
    "RebuildOptions",
    "RebuildSummary",
    "Reject",
    "rebuild",
    "rebuild_with",
    "rejects_path",
]

Progress = Callable[[int, int], None]
#: Given the tokenizer the log records, a function counting a session's forks and realigns by
#: drift class (:func:`tito_cli.report.drift.drift_class_counter`), or ``None`` to skip it.
DriftCounter = Callable[[str | None], SessionFacts | None]


@dataclass(frozen=True, slots=True)
class RebuildOptions:
    """How a rebuild runs and what it writes, besides its inputs, output and policy (see :func:`rebuild`)."""

    overwrite: bool = False
    output_format: str = "parquet"
    #: The output format's options: its ``Options`` instance or a mapping of its fields.
    options: object = None
    unfinished: Unfinished = "keep"
    drift_counter: DriftCounter | None = None
    #: The runner (run/runner.py ``RUNNERS``: ``local``, ``ray``) and its ``Options`` (an instance
    #: or a mapping of its fields: ``{"workers": 2}`` for ``local``).
    engine: str = "local"
    engine_options: object = None


@dataclass(slots=True)
class RebuildSummary:
    out: Path
    rejects_file: Path
    policy: Policy
    sessions: int = 0
    #: Totals; callers start them with ``SessionReport.for_policy(policy)`` so forks list the policy's causes.
    totals: SessionReport = field(default_factory=SessionReport)
    #: Sessions rebuilt that yielded no sample at all.
    sessions_without_samples: int = 0
    #: Sessions rebuilt without a sessions row (reward 0.0, null index fields).
    sessions_without_row: int = 0
    #: Sessions rows whose session has no turns (nothing to rebuild).
    rows_without_turns: list[str] = field(default_factory=list)
    rejected: list[Reject] = field(default_factory=list)
    #: (session id, note) for valid sessions worth a word: no samples and why, seq gaps,
    #: sessions rows without turns.  In session-id order.
    notes: list[tuple[str, str]] = field(default_factory=list)
    tokenizer: str | None = None
    #: Leftover temporaries of a killed earlier rebuild of the same output, removed.
    stale_temporaries_removed: list[Path] = field(default_factory=list)
    #: The output format (a module of ``tito_cli/export/``), the files it wrote, and its warnings.
    format: str = "parquet"
    files: list[Path] = field(default_factory=list)
    samples_written: int = 0
    warnings: list[str] = field(default_factory=list)
    #: ``(asked, used)`` when an explicit worker count was lowered because the log's batches
    #: would have decoded its row groups several times over (run/plan.py ``worker_cap``).
    workers_capped: tuple[int, int] | None = None

    def add_session(self, session_id: str, report: SessionReport) -> None:
        """Count one rebuilt session (the local and the Ray engine both report through here)."""
        self.sessions += 1
        self.totals.add(report)
        self.sessions_without_row += report.missing_sessions_row
        self.sessions_without_samples += not report.samples
        self.notes.extend((session_id, note) for note in report.notes())

    def finish(self, session_ids: Iterable[str], sessions_table: SessionsTable, rejected: list[Reject]) -> None:
        """Close the summary: the notes and the complete, sorted list of rejects.

        ``session_ids`` are the sessions with turns; sessions rows without turns
        become notes, and unusable sessions rows of sessions with no turns are
        rejected too, so nothing in the log goes unreported.
        """
        # Both in code-point order: one walk, no set of every id.
        with_turns = session_ids if isinstance(session_ids, Sequence) else sorted(session_ids)
        self.rows_without_turns = [sid for sid in sessions_table.infos if not _has(with_turns, sid)]
        self.notes.extend((sid, "sessions row without turns (nothing to rebuild)") for sid in self.rows_without_turns)
        self.notes.sort(key=lambda note: note[0])
        rejected_ids = {r.session_id for r in rejected}
        extra = [
            Reject(sid, reason, ref.file, ref.row)
            for sid, (reason, ref) in sessions_table.invalid.items()
            if sid not in rejected_ids
        ]
        self.rejected = sorted([*rejected, *extra], key=lambda r: r.session_id)


def _has(ordered: Sequence[str], item: str) -> bool:
    """Whether ``item`` is in ``ordered`` (sorted)."""
    k = bisect.bisect_left(ordered, item)
    return k < len(ordered) and ordered[k] == item


def rebuild(
    inputs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    policy: Policy | None = None,
    *,
    overwrite: bool = False,
    progress: Progress | None = None,
    workers: int | None = None,
    batch_bytes: float | None = None,
    output_format: str = "parquet",
    options: object = None,
    extra_rejects: Iterable[Reject] = (),
    unfinished: Unfinished = "keep",
    drift_counter: DriftCounter | None = None,
    engine: str = "local",
) -> RebuildSummary:
    """Rebuild every session under ``inputs`` into ``out`` (Parquet, docs/spec.md §5, or ``output_format``).

    Invalid sessions are left out and listed in ``<out>.rejects.jsonl``;
    unreadable files raise :class:`~tito_cli.errors.LogError` before anything
    is written.  The output and the rejects report appear together, each
    atomically, or (on an error) neither does.

    ``output_format`` names an output format (``parquet``, ``slime``, ``skyrl``, ``trl``,
    or one registered; see docs/export.md) and ``options`` its options: an instance of
    its ``Options`` dataclass or a mapping of its fields (``{"split_by": 4}``).
    ``extra_rejects`` (sessions an earlier step left out, e.g. an import)
    join the rejects report, which is published with the output.

    ``workers`` processes rebuild sessions in parallel (default: as many of
    this machine's cores as the log's layout can use without decoding its row
    groups twice, :func:`tito_cli.run.plan.workers_for`; small logs are
    rebuilt in-process).  A count given is lowered the same way, and
    ``summary.workers_capped`` says so, unless ``batch_bytes`` is given too;
    the output is the same for any number.  ``batch_bytes`` sets the size of the batches of
    sessions handed to workers (see :func:`tito_cli.run.plan.plan_batches`).
    ``unfinished``: sessions without a sessions row are rebuilt with reward
    0.0 (``keep``, their samples say ``"finished": false``) or rejected.
    ``drift_counter(tokenizer)``, given the tokenizer the log records, returns
    a function counting each session's forks and realigns by drift class
    (:func:`tito_cli.report.drift.drift_class_counter`), or ``None`` to skip it;
    the totals are in ``summary.totals.drift_classes``.
    ``engine``: the runner (``local``, or ``ray``: a Ray Data pipeline, the same files);
    ``workers`` and ``batch_bytes`` are the local runner's options, refused for another.
    """
    given = {"workers": workers, "batch_bytes": batch_bytes}
    run = RebuildOptions(
        overwrite=overwrite,
        output_format=output_format,
        options=options,
        unfinished=unfinished,
        drift_counter=drift_counter,
        engine=engine,
        engine_options={k: v for k, v in given.items() if v is not None},
    )
    return rebuild_with(inputs, out, policy, run, progress=progress, extra_rejects=extra_rejects)


def rebuild_with(
    inputs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    policy: Policy | None,
    run: RebuildOptions,
    *,
    progress: Progress | None = None,
    extra_rejects: Iterable[Reject] = (),
) -> RebuildSummary:
    """:func:`rebuild` with its options as one typed value (what the command line builds).

    The one place a rebuild's output is handled, for every runner: targets checked before
    anything is read, a killed run's temporaries swept, the sink opened, and everything
    published together (or, on an error, nothing).
    """
    policy = policy or default_policy()
    out = Path(out)
    runner = runner_for(run.engine, run.engine_options)
    rejects_file = rejects_path(out)
    input_paths = [Path(p) for p in inputs]
    files = require_logs(discover_files(input_paths), input_paths)
    # Checked before anything is read: never an input (also through a {rollout_id} pattern), never a special file.
    pattern = getattr(format_options(run.output_format, run.options), "out_pattern", None)
    output = RunOutput(
        out, overwrite=run.overwrite, rejects_file=rejects_file, reads=input_paths, found=files, pattern=pattern
    )
    rejected: list[Reject] = list(extra_rejects)
    with runner.open(files, run.unfinished, out.parent) as opened:
        check_sessions_given(input_paths, opened.log_files)
        summary = RebuildSummary(
            out=out,
            rejects_file=rejects_file,
            policy=policy,
            totals=SessionReport.for_policy(policy),
            tokenizer=opened.tokenizer,
            format=run.output_format,
            workers_capped=opened.workers_capped,
        )
        summary.stale_temporaries_removed = output.sweep()
        count_drift = run.drift_counter(opened.tokenizer) if run.drift_counter is not None else None
        sink = output.open_sink(run.output_format, SinkContext(policy, opened.tokenizer, run.options, run.overwrite))
        _rebuild_into(sink, opened, policy, count_drift, summary, rejected, progress)
    try:
        summary.finish(opened.session_ids(), opened.sessions_table, rejected)
    except BaseException:
        sink.abort()
        raise
    output.publish(sink, [r.to_dict() for r in summary.rejected])
    summary.files = list(sink.files)
    summary.samples_written = sink.samples_written
    summary.warnings = list(sink.warnings)
    if run.drift_counter is not None and count_drift is None:
        name = opened.tokenizer or "(none recorded)"
        summary.warnings.append(
            f"drift classes not counted: the log's tokenizer {name} is not found here (pass --tokenizer PATH)"
        )
    return summary


def runner_for(engine: str, options: object = None) -> Runner:
    """The runner called ``engine`` with its ``options``; ``ValueError`` for an unknown engine or an
    option the engine does not have (``workers`` for ``ray``: refused rather than ignored)."""
    return RUNNERS.get(engine)(RUNNERS.options(engine, options))


def _rebuild_into(
    sink: Sink,
    opened: OpenedLog,
    policy: Policy,
    count_drift: SessionFacts | None,
    summary: RebuildSummary,
    rejected: list[Reject],
    progress: Progress | None,
) -> None:
    """Every session's output into ``sink`` (in session-id order) and ``summary``; rejections into ``rejected``."""
    total = len(opened.session_ids())
    try:
        for done, result in enumerate(opened.outputs(policy, count_drift), start=1):
            if isinstance(result, Reject):
                rejected.append(result)
            else:
                assert result.table is not None
                with writing(summary.out):
                    sink.add(result.table)
                summary.add_session(result.session_id, result.report)
                # Samples --routed-experts could not complete: the session's others were written.
                for reason in result.report.rejected_samples:
                    rejected.append(Reject(result.session_id, reason, None, None))
            if progress is not None:
                progress(done, total)
    except OSError as exc:
        sink.abort()
        # Reading errors arrive as LogError; an OSError here is the output's (a full disk, EFBIG).
        raise OutputError(f"cannot write ({exc})", file=summary.out) from None
    except BaseException:
        sink.abort()
        raise
