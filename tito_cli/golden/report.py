"""A golden check, as text for a person (``tito check``, the pytest plugin) or as JSON.

Renderers only build: a :class:`rich.text.Text` carrying colours (the CLI's
console drops them off a terminal or under ``NO_COLOR``; ``.plain`` gives the
same text without them) or a JSON-ready dict.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ..render.visible import one_line
from .compare import CheckReport, DiffLine, SessionCheck, Status

__all__ = ["check_report_dict", "render_check_report"]

_DIFF_STYLES = {"-": "red", "+": "green", "@": "cyan", "…": "dim", "header": "bold", " ": ""}
_LABELS = {
    Status.CHANGED: ("CHANGED", "bold red"),
    Status.NEW: ("NEW", "bold yellow"),
    Status.STALE: ("STALE", "bold yellow"),
}
_UPDATED = {Status.CHANGED: "updated", Status.NEW: "added", Status.STALE: "removed"}


def capped(diff: list[DiffLine], limit: int) -> tuple[list[DiffLine], int]:
    """The first ``limit`` lines of ``diff`` (all when ``limit`` is 0) and how many were cut."""
    if limit <= 0 or len(diff) <= limit:
        return diff, 0
    return diff[:limit], len(diff) - limit


def _diff_text(line: DiffLine) -> str:
    return line.text if line.kind in ("header", "@", "…") else line.kind + line.text


def _failure(check: SessionCheck, diff_lines: int, out: Text) -> None:
    label, style = _LABELS[check.status]
    out.append(f"{label:<8}", style=style)
    if check.status is Status.CHANGED:
        out.append(f" {one_line(check.session_id)}: the rebuilt dump differs from {check.file}\n")
        shown, cut = capped(check.diff(), diff_lines)
        for line in shown:
            out.append(_diff_text(line) + "\n", style=_DIFF_STYLES[line.kind])
        if cut:
            out.append(f"⋯ {cut} more diff lines (--diff-lines 0 shows them all) ⋯\n", style="dim")
    elif check.status is Status.NEW:
        out.append(f" {one_line(check.session_id)}: no golden dump ({check.file} does not exist)\n")
    else:
        out.append(f" {one_line(check.session_id)}: {check.file} has no session in the log\n")


def render_check_report(report: CheckReport, *, diff_lines: int = 200, accept_command: str | None = None) -> Text:
    """What ``tito check`` prints; ends with the command that accepts the change when it failed."""
    out = Text()
    failures = report.failures
    counts = report.counts()
    tally = ", ".join(f"{counts[s.value]} {s.value}" for s in Status if counts[s.value] or s is Status.PASSED)
    if report.updated:
        for check in failures:
            verb = _UPDATED[check.status]
            out.append(f"{verb:<8}", style="bold green" if check.status is not Status.STALE else "bold yellow")
            out.append(f" {one_line(check.session_id)}: {check.file}\n")
        if failures:
            out.append(f"golden dumps updated in {report.golden_dir}: {tally}\n", style="bold")
        else:
            out.append(f"golden dumps already up to date in {report.golden_dir}: {tally}\n", style="bold")
        return out
    for check in failures:
        _failure(check, diff_lines, out)
        out.append("\n")
    if not failures:
        out.append(f"golden check passed: {tally} ({report.golden_dir})\n", style="bold green")
        return out
    out.append(f"golden check FAILED: {tally} ({report.golden_dir})\n", style="bold red")
    if not report.golden_existed:
        out.append(f"(the golden folder {report.golden_dir} does not exist)\n", style="yellow")
    if not report.stale_checked:
        out.append("(stale dumps are not looked for when only some sessions are checked)\n", style="dim")
    if accept_command:
        out.append("accept the rebuilt dumps with:\n")
        out.append(f"  {accept_command}\n", style="bold")
    return out


def check_report_dict(
    report: CheckReport, *, diff_lines: int = 200, accept_command: str | None = None
) -> dict[str, Any]:
    """The ``--json`` form: every session with its status, diffs as lists of lines."""
    sessions = []
    for check in report.checks:
        entry: dict[str, Any] = {
            "session_id": check.session_id,
            "status": check.status.value,
            "file": str(check.file),
        }
        if check.status is Status.CHANGED:
            shown, cut = capped(check.diff(), diff_lines)
            entry["diff"] = [_diff_text(line) for line in shown]
            entry["diff_lines_cut"] = cut
        sessions.append(entry)
    return {
        "ok": report.ok,
        "golden_dir": str(report.golden_dir),
        "updated": report.updated,
        "stale_checked": report.stale_checked,
        "golden_existed": report.golden_existed,
        "counts": report.counts(),
        "sessions": sessions,
        "accept_command": None if report.ok else accept_command,
    }
