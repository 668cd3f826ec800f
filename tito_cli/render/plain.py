"""Renderables as plain text, for output that is not a terminal (pipes, files, tests)."""

from __future__ import annotations

import io
import os

from rich.console import RenderableType

from .visible import SafeConsole

__all__ = ["plain_width", "to_plain"]

#: Width of plain output when $COLUMNS does not say: fixed, so piped output is the same everywhere.
DEFAULT_PLAIN_WIDTH = 100


def plain_width() -> int:
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 20 else DEFAULT_PLAIN_WIDTH


def to_plain(renderable: RenderableType, width: int | None = None) -> str:
    """``renderable`` laid out ``width`` columns wide, no ANSI codes, no trailing spaces."""
    buffer = io.StringIO()
    console = SafeConsole(
        file=buffer, width=width or plain_width(), color_system=None, highlight=False, force_terminal=False, emoji=False
    )
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + "\n"
