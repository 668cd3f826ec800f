"""``tito inspect --drift``: each fork and realign with its decoded window, a few lines each.

A point is a heading (turn, decision, drift class, the sample it shows in)
and two lines, the held tokens and the prompt's, from the same position, so
the eye reads down to the first difference.  That token is reversed on a
terminal and between ``⟦`` and ``⟧`` in plain text.  Line breaks inside the
window are shown as ``↵`` and not broken, so a point stays a few lines tall.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..tokenizer import TokenText

__all__ = ["render_drift"]

_KIND_STYLE = {"fork": "bold red", "realign": "bold yellow"}


def _window(text: TokenText, ids: list[int], marked: int, plain: bool, held: bool) -> Text:
    line = Text(overflow="fold")
    for i, token in enumerate(ids):
        piece = text.piece(token) if text.decodes else f"{token} "
        if i == marked:
            line.append(f"⟦{piece}⟧" if plain else piece, style="reverse bold")
        else:
            line.append(piece, style="dim" if held and i > marked else "")
    line.highlight_regex("[␣↵⇥]", "dim")
    return line


def _windows(text: TokenText, point: dict[str, Any], plain: bool) -> Table:
    """Labels in a column of their own, so a window wraps (on a terminal) under its own start."""
    grid = Table.grid(padding=0)
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(overflow="fold")
    marked = point["index"] - point["window_start"]
    grid.add_row("  held   ", _window(text, point["held_ids"], marked, plain, True))
    grid.add_row("  prompt ", _window(text, point["prompt_ids"], marked, plain, False))
    return grid


def render_drift(points: list[dict[str, Any]], text: TokenText, *, plain: bool) -> RenderableType:
    """The drift points from :func:`tito_cli.report.drift_points.drift_points`."""
    if not points:
        return Text("no fork or realign: every prompt extended the tokens held for its path", style="green")
    parts: list[RenderableType] = []
    for p in points:
        if parts:
            parts.append(Text(""))
        head = Text()
        head.append(f"seq {p['seq']}", style="bold")
        head.append(" · ")
        head.append(p["label"], style=_KIND_STYLE.get(p["kind"], ""))
        if p["drift_class"]:
            head.append(f" · {p['drift_class']}")
        where = f"sample {p['sample']}" if p["sample"] is not None else "no sample"
        head.append(
            f" · leaf {p['leaf']} → {where} · first difference at token {p['index']:,} of {p['held_length']:,} held",
            style="dim",
        )
        parts.append(head)
        parts.append(_windows(text, p, plain))
    return Group(*parts)
