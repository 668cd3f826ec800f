"""The closing summary of ``tito import``."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..capture.importing import ImportSummary
from .visible import one_line, session_line

__all__ = ["render_import_summary"]

#: Rejects listed in the summary; all of them are in the report file.
SHOWN = 10


def render_import_summary(summary: ImportSummary, *, show_out: bool = True) -> RenderableType:
    """The import's totals, what was filled in, and the rejects; ``show_out=False`` leaves out where the log went."""
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="left")
    table.add_column(justify="right")
    table.add_row("sessions imported", f"{len(summary.sessions):,}")
    table.add_row("turns", f"{summary.turns:,}")
    table.add_row("sessions without a reward (no sessions row)", f"{summary.sessions_without_reward:,}")
    table.add_row("rejected sessions", f"{len(summary.rejected):,}")
    parts: list[RenderableType] = [table]
    filled = summary.filled_counts()
    if filled:
        parts.append(Text(""))
        parts.append(Text("filled in (sessions):", style="bold"))
        parts.extend(Text(f"  {note} ({count:,})") for note, count in filled)
    if summary.unused_rewards:
        parts.append(Text(""))
        shown = ", ".join(one_line(sid) for sid in summary.unused_rewards[:SHOWN])
        more = f" … and {len(summary.unused_rewards) - SHOWN} more" if len(summary.unused_rewards) > SHOWN else ""
        parts.append(Text(f"rewards for sessions not imported ({len(summary.unused_rewards)}): {shown}{more}"))
    if summary.rejected:
        parts.append(Text(""))
        details = f" (details in {summary.report_file})" if show_out else ""
        parts.append(Text(f"rejected{details}:", style="bold yellow"))
        for reject in summary.rejected[:SHOWN]:
            where = reject.file or "?"
            if reject.row is not None:
                where += f", row {reject.row}"
            parts.append(Text(session_line(reject.session_id, f"{reject.reason} [{where}]")))
        if len(summary.rejected) > SHOWN:
            parts.append(Text(f"  … and {len(summary.rejected) - SHOWN} more"))
    if show_out:
        parts.append(Text(""))
        parts.append(Text(f"wrote {summary.out}", style="bold"))
    return Group(*parts)
