"""``tito ls``: one line per session."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from .visible import one_line

__all__ = ["render_listing"]

_NUMBERS = ("turns", "leaves", "samples", "trained", "context", "forks", "realigns", "merges", "reward")
#: On a narrow screen, the columns left out first (the session id is never cut: GRPO rollouts of one
#: prompt differ only in their last characters).
_DROP_FIRST = ("context", "leaves", "merges", "realigns", "turns", "trained", "reward", "forks", "samples")
#: Counts worth the eye when non-zero.
_HIGHLIGHT = {"forks": "red", "realigns": "yellow", "merges": "magenta"}


def _format(row: dict[str, Any], name: str) -> str:
    value = row[name]
    if value is None:
        return ""
    return f"{value:g}" if name == "reward" else f"{value:,}"


def _cell(row: dict[str, Any], name: str) -> Text:
    value = row[name]
    style = _HIGHLIGHT.get(name, "") if value else ""
    if name == "samples" and value == 0:
        style = "bold yellow"  # a session that trains nothing
    return Text(_format(row, name), style=style)


def render_listing(rows: list[dict[str, Any]], width: int = 100) -> RenderableType:
    """The listing for a screen ``width`` columns wide.

    The session id is shown whole.  When the line would not fit, count
    columns are left out (least telling first) before anything is cut;
    counts keep their width (rich would otherwise squeeze them out of
    sight).  A reject reason is cut to what is left of the line and given in
    full, with its file and row, under the table.
    """
    widths = {name: max([len(name), *(len(_format(r, name)) for r in rows)]) for name in _NUMBERS}
    widths["session"] = max([7, *(len(one_line(r["session"])) for r in rows)])
    numbers = list(_NUMBERS)

    def line(names: list[str]) -> int:
        # Columns are two spaces apart (one of padding on each side), none at the edges.
        return widths["session"] + sum(widths[n] + 2 for n in names)

    for name in _DROP_FIRST:
        if line(numbers) <= width:
            break
        numbers.remove(name)
    rejected = [r for r in rows if r["rejected"] is not None]
    reason_width = width - line(numbers) - 2
    reason_column = bool(rejected) and reason_width >= len("rejected")

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 1))
    # Folded, never cut, if even the id alone is wider than the screen.
    table.add_column("session", no_wrap=False, overflow="fold", min_width=min(widths["session"], width))
    for name in numbers:
        table.add_column(name, justify="right", no_wrap=True, width=widths[name])
    if reason_column:
        table.add_column("rejected", no_wrap=True, overflow="ellipsis", max_width=reason_width)
    for row in rows:
        session = Text(one_line(row["session"]), style="red" if row["rejected"] is not None else "")
        cells: list[Text | str] = [session, *(_cell(row, n) for n in numbers)]
        if reason_column:
            reason = row["rejected"] or ""
            if reason and reason_width < 24:
                reason = "yes"  # too narrow to say why; the full reason follows the table
            elif len(reason) > reason_width:
                reason = reason[: reason_width - 1] + "…"
            cells.append(Text(one_line(reason), style="red"))
        table.add_row(*cells)
    notes: list[Text] = []
    unfinished = [r["session"] for r in rows if r["unfinished"] and r["rejected"] is None]
    if unfinished:
        notes += [Text(""), Text("no sessions row (rebuilt with reward 0.0; --unfinished reject leaves them out):")]
        notes += [Text(f"  {one_line(session)}") for session in unfinished]
    if rejected:
        notes += [Text(""), Text("rejected:", style="bold red")]
        for row in rejected:
            where = f" [{row['file']}, row {row['row']}]" if row["file"] is not None else ""
            notes.append(Text(one_line(f"  {row['session']}: {row['rejected']}{where}")))
    return Group(table, *notes) if notes else table
