"""``tito inspect``'s drift: each fork and realign, where the held tokens and the prompt part.

A divergence is shown as a heading (its seq, the decision in the turns'
words, the drift class) over two lines, the tokens held before the turn and
the turn's prompt, from the same position, split where they first differ
(:attr:`~tito_cli.report.drift.Divergence.index`).  Two presentations:

* :func:`render_drift_summary`, for ``--view drift`` beside the other views,
  in the order the linearizer decided: the decoded text clipped around the
  split, which ``▸`` marks;
* :func:`render_drift_windows`, for ``--drift`` alone, in arrival order: the
  sample the divergence shows in, and both whole windows token by token, the
  first differing token reversed on a terminal and between ``⟦`` and ``⟧`` in
  plain text.  Line breaks inside a window are shown as ``↵``, not broken,
  so a point stays a few lines tall.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..report.drift import Divergence
from ..report.drift_points import DriftPoint, decision_label
from ..tokenizer import TokenText

__all__ = ["DIVERGENCE_MARK", "render_drift_summary", "render_drift_windows"]

#: Stands between the tokens both sides share and the first that differ (the summary).
DIVERGENCE_MARK = " ▸ "
#: Characters the summary shows before the mark and after it (``--json`` has the whole windows).
_SHARED_CHARS = 32
_DIFFERING_CHARS = 48
#: A fork is red, a realign yellow, in both presentations.
_KIND_COLOUR = {"fork": "red", "realign": "yellow"}


def _sides(d: Divergence) -> tuple[tuple[str, list[int]], tuple[str, list[int]]]:
    """The held and the prompt side of the window, labelled."""
    return ("held", d.held_ids), ("prompt", d.prompt_ids)


def _split(d: Divergence) -> int:
    """Where the window's sides first differ, counted from its start."""
    return d.index - d.window_start


# -- the summary (--view drift) ----------------------------------------------------------


def render_drift_summary(items: Sequence[Divergence]) -> RenderableType:
    if not items:
        return Text("no forks or realigns: every prompt extends the tokens held for its path", style="dim")
    parts: list[RenderableType] = []
    for d in items:
        parts.append(Text(f"seq {d.seq}  {decision_label(d)}  {d.drift_class}", style=_KIND_COLOUR[d.kind]))
        shared, differing = _clipped(d)
        for (side, _), differs in zip(_sides(d), differing, strict=True):
            line = Text(f"  {side:<6}  ", style="bold")
            line.append(shared, style="dim")
            line.append(DIVERGENCE_MARK)
            line.append(differs)
            parts.append(line)
    parts.append(Text("▸ marks the first token that differs; ␣ ↵ ⇥ are space, newline, tab.", style="dim"))
    return Group(*parts)


def _clipped(d: Divergence) -> tuple[str, tuple[str, str]]:
    """The shared text before the split (its end), and each side's text after it (its start); ids undecoded."""
    if d.shared_text is not None and d.held_text is not None and d.prompt_text is not None:
        shared = d.shared_text
        if len(shared) > _SHARED_CHARS:
            shared = "…" + shared[-_SHARED_CHARS:]
        return shared, (_clip(d.held_text), _clip(d.prompt_text))
    split = _split(d)
    shared = " ".join(map(str, d.held_ids[:split]))
    return shared, (" ".join(map(str, d.held_ids[split:])), " ".join(map(str, d.prompt_ids[split:])))


def _clip(text: str) -> str:
    return text if len(text) <= _DIFFERING_CHARS else text[:_DIFFERING_CHARS] + "…"


# -- the windows (--drift) ---------------------------------------------------------------


def render_drift_windows(points: Sequence[DriftPoint], text: TokenText, *, plain: bool) -> RenderableType:
    """The points of :func:`tito_cli.report.drift_points.drift_points`, each over its two windows."""
    if not points:
        return Text("no fork or realign: every prompt extended the tokens held for its path", style="green")
    parts: list[RenderableType] = []
    for point in points:
        d = point.divergence
        if parts:
            parts.append(Text(""))
        head = Text()
        head.append(f"seq {d.seq}", style="bold")
        head.append(" · ")
        head.append(point.label, style=f"bold {_KIND_COLOUR[d.kind]}")
        head.append(f" · {d.drift_class}")
        where = f"sample {point.sample}" if point.sample is not None else "no sample"
        head.append(
            f" · leaf {d.leaf} → {where} · first difference at token {d.index:,} of {point.held_length:,} held",
            style="dim",
        )
        parts.append(head)
        parts.append(_windows(d, text, plain))
    return Group(*parts)


def _windows(d: Divergence, text: TokenText, plain: bool) -> Table:
    """Labels in a column of their own, so a window wraps (on a terminal) under its own start."""
    grid = Table.grid(padding=0)
    grid.add_column(no_wrap=True, style="dim")
    grid.add_column(overflow="fold")
    for side, ids in _sides(d):
        # What the held side has beyond the split is what the prompt drops: dimmed.
        grid.add_row(f"  {side:<7}", _window(text, ids, _split(d), plain, dim_after_split=side == "held"))
    return grid


def _window(text: TokenText, ids: list[int], split: int, plain: bool, *, dim_after_split: bool) -> Text:
    line = Text(overflow="fold")
    for i, token in enumerate(ids):
        piece = text.piece(token) if text.decodes else f"{token} "
        if i == split:
            line.append(f"⟦{piece}⟧" if plain else piece, style="reverse bold")
        else:
            line.append(piece, style="dim" if dim_after_split and i > split else "")
    line.highlight_regex("[␣↵⇥]", "dim")
    return line
