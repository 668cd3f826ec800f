"""The typer application, its consoles, and the one place errors become exit codes."""

from __future__ import annotations

import contextlib
import functools
import sys
import traceback
from collections.abc import Callable, Collection, Iterator
from typing import Any, NoReturn, TypeVar

import typer
import typer.core
from rich.markup import escape

from ..errors import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_INTERNAL,
    EXIT_OK,
    EXIT_OUTPUT,
    EXIT_REJECTED,
    EXIT_USAGE,
    WRITE_ERRNOS,
    TitoError,
    UnknownSessionError,
    write_error,
)
from ..render.visible import SafeConsole, one_line

__all__ = [
    "EXIT_CODES_HELP",
    "app",
    "err_console",
    "exit_codes_help",
    "guarded",
    "out_console",
    "progress_bar",
    "state",
]

#: What each exit status means, for the help of the commands that can end with it.
EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_INTERNAL: "internal error (a bug: please report it with -v output)",
    EXIT_USAGE: "usage error, unknown session, or an optional dependency the options need is not installed",
    EXIT_REJECTED: "output written but some sessions were rejected (see the rejects report)",
    EXIT_BAD_INPUT: "a log file or import source is unreadable or has the wrong schema, or no log was found "
    "(nothing written)",
    EXIT_OUTPUT: "the output cannot be written (exists without --overwrite, or the OS refused)",
    EXIT_CHECK_FAILED: "tito check found a changed, missing or stale golden dump",
}


def exit_codes_help(*codes: int) -> str:
    """The "Exit status" paragraph of a command's help: 0, 1 and 2 (every command's), then ``codes``."""
    shown = sorted({EXIT_OK, EXIT_INTERNAL, EXIT_USAGE, *codes})
    return "Exit status: " + "; ".join(f"{code} {EXIT_MEANINGS[code]}" for code in shown) + "."


EXIT_CODES_HELP = exit_codes_help(*EXIT_MEANINGS)


def _global_flags_first(args: list[str], commands: Collection[str]) -> list[str]:
    """``args`` with ``-v``/``--verbose`` given after the command moved before it (both spellings work)."""
    try:
        at = next(i for i, arg in enumerate(args) if arg in commands or arg == "--")
    except StopIteration:
        return args
    end = args.index("--", at) if "--" in args[at:] else len(args)
    moved = [arg for arg in args[at:end] if arg in _GLOBAL_FLAGS]
    if not moved or args[at] == "--":
        return args
    rest = [arg for arg in args[at:end] if arg not in _GLOBAL_FLAGS]
    return args[:at] + moved + rest + args[end:]


_GLOBAL_FLAGS = ("-v", "--verbose")


class _Group(typer.core.TyperGroup):
    """tito's command group: the global ``-v`` is accepted after the command too."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        return super().parse_args(ctx, _global_flags_first(args, self.commands))


app = typer.Typer(
    name="tito",
    cls=_Group,
    help="Rebuild token-level RL training samples, offline, from recorded agent-session turn logs.\n\n"
    + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    # Locals here can be whole token arrays: never print them.
    pretty_exceptions_show_locals=False,
    rich_markup_mode="rich",
)

#: Data goes to stdout, diagnostics (progress, summaries of what happened, errors) to stderr.
#: No emoji codes: a path or reason holding ":name:" is printed as it is (and rich's emoji
#: table, a few milliseconds of every command's start-up, is never loaded).
#: Both escape control characters in what they show (render/visible.py): logs are untrusted.
out_console = SafeConsole(highlight=False, emoji=False)
err_console = SafeConsole(stderr=True, highlight=False, emoji=False)


class _State:
    verbose: bool = False


state = _State()


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__

        out_console.print(f"tito {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def _global_options(
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Show Python tracebacks for errors (before or after the command)."
    ),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print tito's version and exit."
    ),
) -> None:
    state.verbose = verbose


F = TypeVar("F", bound=Callable[..., Any])


def report_error(error: TitoError) -> None:
    # The message names files and sessions from the log: one line, no markup of its own (brackets
    # such as "pip install 'tito-cli[slime]'" stay).
    message = escape(one_line(str(error)))
    err_console.print(f"[bold red]ERROR[/] {message}", markup=True, highlight=False, soft_wrap=True)
    if isinstance(error, UnknownSessionError) and error.candidates:
        err_console.print("did you mean:" if error.suggestions else "candidates:", soft_wrap=True)
        for candidate in error.candidates:
            err_console.print(f"  {one_line(candidate)}", markup=False, soft_wrap=True)
    if error.tip:
        err_console.print(f"[bold]TIP[/] {escape(one_line(error.tip))}", soft_wrap=True)


def guarded(command: F) -> F:
    """Turn tito's errors into an ``ERROR`` line and an exit code; tracebacks only with ``-v``."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except (typer.Exit, typer.Abort, SystemExit, typer.BadParameter):
            # typer's own ways out (a usage error is exit 2).  Named through typer, not click:
            # typer vendors click from 0.26 on, and importing click too costs start-up time.
            raise
        except TitoError as error:
            if state.verbose:
                traceback.print_exc(file=sys.stderr)
            report_error(error)
            raise typer.Exit(error.exit_code) from None
        except KeyboardInterrupt:
            err_console.print("interrupted")
            raise typer.Exit(130) from None
        except OSError as error:
            if error.errno not in WRITE_ERRNOS:
                _internal(error)
            # A full disk or the file-size limit, wherever a command met it: exit 5, the same for every command.
            if state.verbose:
                traceback.print_exc(file=sys.stderr)
            report_error(write_error(error))
            raise typer.Exit(EXIT_OUTPUT) from None
        except Exception as error:
            _internal(error)

    return wrapper  # type: ignore[return-value]


def _internal(error: Exception) -> NoReturn:
    if state.verbose:
        traceback.print_exc(file=sys.stderr)
    err_console.print(
        f"[bold red]ERROR[/] internal error: {type(error).__name__}: {escape(one_line(str(error)))}",
        markup=True,
        soft_wrap=True,
    )
    err_console.print("[bold]TIP[/] run again with -v for the traceback, and please report it.")
    raise typer.Exit(EXIT_INTERNAL) from None


Progress = Callable[[int, int], None]


@contextlib.contextmanager
def progress_bar(verb: str, unit: str) -> Iterator[Progress | None]:
    """A ``progress(done, total)`` callback drawing a bar on stderr; ``None`` when stderr is not a terminal."""
    if not err_console.is_terminal:
        yield None
        return
    # Imported here: rich.progress is a noticeable part of start-up that a piped run need not pay.
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    columns = (TextColumn(verb), BarColumn(), MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn())
    with Bar(*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(verb, total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield progress
