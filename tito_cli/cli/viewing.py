"""What the read-only commands (inspect, ls, stats) share: where logs are, their decoder, how output is shown."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import typer
from rich.console import RenderableType

from ..errors import TokenizerError, UnreadableLogError
from ..render.plain import plain_width, to_plain
from ..run.corpus import Corpus
from ..tokenizer import TokenText, parse_tokenizer_options
from .app import out_console
from .unfinished import UnfinishedChoice

__all__ = ["LOGS_ENV", "PAGER_ENV", "UNWRAPPED", "choose_tokenizer", "is_plain", "open_logs", "show", "with_pager"]

#: Where commands that read logs look when no folder is given (default ./logs).
LOGS_ENV = "TITO_LOGS"
#: The pager for a terminal, before $PAGER and ``less`` (as git's GIT_PAGER); empty or ``cat`` for none.
PAGER_ENV = "TITO_PAGER"
#: Width of output that must not wrap (pipes, files): a line of data stays one line for grep.
UNWRAPPED = 100_000


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


def _pager_command() -> list[str] | None:
    spec = os.environ.get(PAGER_ENV)
    if spec is None:
        spec = os.environ.get("PAGER", "less")
    command = shlex.split(spec)
    if not command or command[0] == "cat" or shutil.which(command[0]) is None:
        return None
    return command


def with_pager(renderable: RenderableType) -> None:
    """Show ``renderable`` on the terminal through a pager, as git does.

    ``$TITO_PAGER``, else ``$PAGER``, else ``less``; ``LESS=FRX`` unless set
    (quit when it fits one screen, keep the colours, leave the text on the
    screen).  No pager found: printed directly.
    """
    command = _pager_command()
    if command is None:
        out_console.print(renderable)
        return
    with out_console.capture() as capture:
        out_console.print(renderable)
    env = dict(os.environ)
    env.setdefault("LESS", "FRX")
    try:
        pager = subprocess.Popen(command, stdin=subprocess.PIPE, env=env)
        pager.communicate(capture.get().encode(sys.stdout.encoding or "utf-8", errors="replace"))
    except BrokenPipeError:  # the pager was closed before reading everything
        pass
    except OSError:
        out_console.print(renderable)
