"""What the read-only commands (inspect, ls, stats) share: where logs are, their decoder, how output is shown."""

from __future__ import annotations

import os
from pathlib import Path

import typer
from rich.console import RenderableType

from ..errors import TokenizerError, UnreadableLogError
from ..render.plain import plain_width, to_plain
from ..run.corpus import Corpus
from ..tokenizer import TokenText, parse_tokenizer_options
from .app import out_console
from .unfinished import UnfinishedChoice

__all__ = ["LOGS_ENV", "choose_tokenizer", "is_plain", "open_logs", "show"]

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


def choose_tokenizer(values: list[str] | None, recorded: str | None, logs: Path) -> tuple[TokenText, str | None]:
    """The decoder for a read-only view, and a note for the user when it shows ids instead.

    What ``--tokenizer`` names must load (as in every command); a tokenizer
    only recorded in the log falls back to ids, with a note, when it is not
    found here: a viewer should still show what it can.
    """
    choice = parse_tokenizer_options(values)
    if choice.name_for(recorded) is None:
        return TokenText(), "no tokenizer recorded in the log: showing token ids (pass --tokenizer PATH)"
    try:
        return TokenText.open(recorded, [logs], choice), None
    except TokenizerError as exc:
        if values:
            raise
        return TokenText(), f"{exc.message}: showing token ids (pass --tokenizer PATH)"


def is_plain() -> bool:
    """No terminal, or NO_COLOR: plain text, no ANSI codes, trained tokens in [brackets]."""
    return not out_console.is_terminal or out_console.no_color or bool(os.environ.get("NO_COLOR"))


def show(renderable: RenderableType, width: int | None = None) -> None:
    """Print data to stdout: styled on a terminal, else plain text without trailing spaces."""
    if out_console.is_terminal:
        out_console.print(renderable)
    else:
        typer.echo(to_plain(renderable, width or plain_width()), nl=False)
