"""The closing summary of ``tito rebuild``."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..report.session_facts import FORK_PHRASES
from ..run.export import ExportSummary
from ..run.rebuild import RebuildSummary
from .visible import one_line, session_line

__all__ = ["render_export_summary", "render_rebuild_summary"]


def _class_order(name: str) -> tuple[int, int]:
    # Imported here: drift classes are counted with --drift-classes only (the module finds tokenizers).
    from ..report.drift import DRIFT_CLASSES

    kind, _, drift_class = name.partition(": ")
    rank = DRIFT_CLASSES.index(drift_class) if drift_class in DRIFT_CLASSES else len(DRIFT_CLASSES)
    return (0 if kind == "fork" else 1, rank)


def render_rebuild_summary(summary: RebuildSummary) -> RenderableType:
    t = summary.totals
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="left")
    table.add_column(justify="right")

    def row(label: str, value: int | str) -> None:
        table.add_row(label, f"{value:,}" if isinstance(value, int) else value)

    row("sessions rebuilt", summary.sessions)
    row("turns", t.turns)
    if t.skipped_turns:
        row("  skipped (empty prompt)", t.skipped_turns)
    row("samples", t.samples)
    if t.left_out_samples:
        row(f"  left out (first prompt > {summary.policy.max_sample_tokens} tokens)", t.left_out_samples)
    row("trained tokens", t.trained_tokens)
    row("context tokens", t.context_tokens)
    row("forks", t.fork_total)
    for cause in summary.policy.fork_causes:
        row(f"  {FORK_PHRASES[cause.value]}", t.forks.get(cause.value, 0))
    row("realigns", t.realigns)
    if t.drift_classes:
        row("forks and realigns by drift class", sum(t.drift_classes.values()))
        for name, count in sorted(t.drift_classes.items(), key=lambda item: _class_order(item[0])):
            row(f"  {name}", count)
    row("rewrite merges", t.rewrite_merges)
    if t.ambiguous_rewrites:
        row("ambiguous rewrites (not merged)", t.ambiguous_rewrites)
    row("sessions without samples", summary.sessions_without_samples)
    row("sessions without a sessions row", summary.sessions_without_row)
    if summary.rows_without_turns:
        row("sessions rows without turns", len(summary.rows_without_turns))
    row("rejected sessions", len(summary.rejected))

    parts: list[RenderableType] = [table]
    if summary.rejected:
        parts.append(Text(""))
        parts.append(Text(one_line(f"rejected (details in {summary.rejects_file}):"), style="bold yellow"))
        shown = summary.rejected[:10]
        for reject in shown:
            where = f"{reject.file}, row {reject.row}" if reject.file is not None else "?"
            parts.append(Text(session_line(reject.session_id, f"{reject.reason} [{where}]")))
        if len(summary.rejected) > len(shown):
            parts.append(Text(f"  … and {len(summary.rejected) - len(shown)} more"))
    if summary.notes:
        parts.append(Text(""))
        parts.append(Text("notes:", style="bold"))
        for sid, note in summary.notes[:10]:
            parts.append(Text(session_line(sid, note)))
        if len(summary.notes) > 10:
            parts.append(Text(f"  … and {len(summary.notes) - 10} more"))
    if summary.workers_capped is not None:
        asked, used = summary.workers_capped
        parts.append(Text(""))
        parts.append(
            Text(
                one_line(
                    f"note: rebuilt with {used} worker{'s' if used != 1 else ''}, not {asked}: this log's sessions "
                    f"share its row groups, so more workers would each decode the same row groups "
                    f"(docs/performance.md, \"Where memory can still grow\")."
                )
            )
        )
    parts.append(Text(""))
    parts.extend(_warnings(summary.warnings))
    parts.extend(_wrote(summary.files or [summary.out], summary.format))
    return Group(*parts)


def _warnings(lines: list[str]) -> list[RenderableType]:
    """The first line is the warning, the others its details."""
    return [
        Text(one_line(f"WARNING {line}"), style="yellow") if i == 0 else Text(one_line(f"  {line}"))
        for i, line in enumerate(lines)
    ]


def _wrote(files: list[Path], format: str) -> list[RenderableType]:
    what = "" if format == "parquet" else f" ({format})"
    if len(files) == 1:
        return [Text(one_line(f"wrote {files[0]}{what}"), style="bold")]
    return [Text(f"wrote {len(files)} files{what}:", style="bold"), *(Text(one_line(f"  {f}")) for f in files)]


def render_export_summary(summary: ExportSummary) -> RenderableType:
    groups = summary.groups
    mismatched = groups.mismatched()
    n = groups.ungrouped_sessions
    ungrouped = f", {n:,} session{'' if n == 1 else 's'} without a group_index" if n else ""
    lines = [
        f"read {summary.samples_read:,} samples of {summary.sessions:,} sessions from {summary.source}",
        f"groups: {len(groups.groups()):,} by group_index, {len(mismatched):,} whose sample count is not "
        f"their session count{ungrouped}",
        f"samples written: {summary.samples_written:,}",
    ]
    quantiles = summary.length_quantiles()
    if quantiles:
        lines.append("sample lengths (tokens): " + ", ".join(f"{k} {v:,}" for k, v in quantiles.items()))
    if summary.format == "slime":
        lines.append(summary.rollout_ids.line())
    if summary.leaves_out:
        lines.append(f"not written: {summary.leaves_out}")
    parts: list[RenderableType] = [Text(one_line(line)) for line in lines]
    parts.extend(_warnings(summary.warnings))
    parts.extend(_wrote(summary.files, summary.format))
    return Group(*parts)
