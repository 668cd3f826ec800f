"""What the read-only commands (inspect, ls, stats) share: where logs are, and how output is shown."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import RenderableType

from ..errors import UnreadableLogError
from ..render.plain import plain_width, to_plain
from ..run.corpus import Corpus
from .app import out_console
from .unfinished import UnfinishedChoice

__all__ = ["LOGS_ENV", "is_plain", "open_logs", "show"]

#: Where commands that read logs look when no folder is given (default ./logs).
LOGS_ENV = "TITO_LOGS"


def open_logs(logs: Path, unfinished: UnfinishedChoice = UnfinishedChoice.keep) -> Corpus:
    if not logs.exists():
        raise UnreadableLogError(
            "no such log folder",
            file=logs,
            tip=f"give the log folder (inspect: --logs DIR) or set {LOGS_ENV}",
        )
    return Corpus.open([logs], unfinished=unfinished.value)


def is_plain() -> bool:
    """No terminal, or NO_COLOR: plain text, no ANSI codes, trained tokens in [brackets]."""
    return not out_console.is_terminal or out_console.no_color or bool(os.environ.get("NO_COLOR"))


def show(renderable: RenderableType, width: int | None = None) -> None:
    """Print data to stdout: styled on a terminal, else plain text without trailing spaces."""
    if out_console.is_terminal:
        out_console.print(renderable)
    else:
        typer.echo(to_plain(renderable, width or plain_width()), nl=False)
