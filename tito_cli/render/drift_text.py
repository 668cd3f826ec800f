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
from rich.text import Text

from .tokens import TokenText

__all__ = ["render_drift"]

_KIND_STYLE = {"fork": "bold red", "realign": "bold yellow"}


def _window(text: TokenText, ids: list[int], marked: int, plain: bool, label: str) -> Text:
    line = Text()
    line.append(f"  {label:<7}", style="dim")
    for i, token in enumerate(ids):
        piece = text.piece(token) if text.decodes else f"{token} "
        if i == marked:
            line.append(f"⟦{piece}⟧" if plain else piece, style="reverse bold")
        else:
            line.append(piece, style="" if i < marked else "dim" if label == "held" else "")
    line.highlight_regex("[␣↵⇥]", "dim")
    return line


def render_drift(points: list[dict[str, Any]], text: TokenText, *, plain: bool) -> RenderableType:
    """The drift points from :func:`tito_cli.report.drift_window.drift_points`."""
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
        marked = p["index"] - p["window_start"]
        parts.append(_window(text, p["held_ids"], marked, plain, "held"))
        parts.append(_window(text, p["prompt_ids"], marked, plain, "prompt"))
    return Group(*parts)
