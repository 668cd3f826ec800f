"""Errors raised by tito, and the exit codes the CLI maps them to.

Every error tito raises on purpose derives from :class:`TitoError`::

    TitoError
     ├── LogError                 a log file cannot be used at all (rebuild aborts)
     │    ├── UnreadableLogError  not Parquet, truncated, unreadable, empty
     │    ├── SchemaError         a required column is missing or has the wrong type
     │    └── SourceError         an import source (trace file, database) cannot be read at all
     ├── InvalidSessionError      one session's rows are unusable (the session is rejected)
     ├── UnknownSessionError      a session id (or prefix) matches nothing, or too much
     ├── TokenizerError           the tokenizer to decode with is missing or cannot be loaded
     ├── MissingDependencyError   an optional dependency the options need is not installed
     ├── OutputError              the output cannot be written where asked
     └── ExportError              the samples cannot be written in the asked format as they are

Each carries the file, row and session it is about when those are known, so
that the message can name them.  Exceptions become exit codes in one place:
``tito_cli.cli``.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CHECK_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_OUTPUT",
    "EXIT_REJECTED",
    "EXIT_USAGE",
    "WRITE_ERRNOS",
    "ExportError",
    "InvalidSessionError",
    "LogError",
    "MissingDependencyError",
    "OutputError",
    "SchemaError",
    "SourceError",
    "TitoError",
    "TokenizerError",
    "UnknownSessionError",
    "UnreadableLogError",
    "write_error",
]

#: Everything worked.
EXIT_OK = 0
#: A bug in tito (an unexpected exception).
EXIT_INTERNAL = 1
#: Bad command-line usage (typer/click's own code).
EXIT_USAGE = 2
#: Output was written, but at least one session was rejected as invalid.
EXIT_REJECTED = 3
#: A log file could not be read or has the wrong schema; nothing was written.
EXIT_BAD_INPUT = 4
#: The output path cannot be written (exists without --overwrite, or an OS error).
EXIT_OUTPUT = 5
#: ``tito check``: a rebuilt dump differs from its golden, or a golden is missing or stale.
EXIT_CHECK_FAILED = 6


class TitoError(Exception):
    """Root of tito's errors.  ``tip`` is a concrete fix, when there is one."""

    exit_code = EXIT_INTERNAL

    def __init__(
        self,
        message: str,
        *,
        file: str | Path | None = None,
        row: int | None = None,
        session_id: str | None = None,
        tip: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.row = row
        self.session_id = session_id
        self.tip = tip

    def __reduce__(self) -> tuple[object, ...]:
        # Errors cross process boundaries (rebuild workers): keep file, row, session and tip.
        return (_restore, (type(self), self.message, dict(self.__dict__)))

    def __str__(self) -> str:
        where = []
        if self.file is not None:
            where.append(self.file)
        if self.row is not None:
            where.append(f"row {self.row}")
        if self.session_id is not None:
            where.append(f"session {self.session_id!r}")
        return f"{', '.join(where)}: {self.message}" if where else self.message


def _restore(cls: type[TitoError], message: str, state: dict[str, object]) -> TitoError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class LogError(TitoError):
    """A log file cannot be used at all."""

    exit_code = EXIT_BAD_INPUT


class UnreadableLogError(LogError):
    """The file is not a readable Parquet file (truncated, corrupt, not Parquet)."""


class SchemaError(LogError):
    """The file is Parquet but not a turns or sessions table tito understands."""


class SourceError(LogError):
    """An import source is missing, unreadable, or not the format named (``tito import``)."""


class InvalidSessionError(TitoError):
    """One session's rows violate the turn-log contract; the session is rejected whole."""

    exit_code = EXIT_REJECTED


class UnknownSessionError(TitoError):
    """A session id or prefix matched no session, or more than one."""

    exit_code = EXIT_USAGE

    def __init__(
        self, message: str, *, candidates: list[str] | None = None, suggestions: bool = False, **kwargs: object
    ) -> None:
        super().__init__(message, **kwargs)  # type: ignore[arg-type]
        self.candidates = candidates or []
        #: The candidates are near misses of an id that matched nothing ("did you mean"), not the matches.
        self.suggestions = suggestions


class TokenizerError(TitoError):
    """The tokenizer a command must decode with is missing or cannot be loaded."""

    exit_code = EXIT_USAGE


class MissingDependencyError(TitoError):
    """An optional dependency the chosen options need is not installed; ``tip`` says how to install it."""

    exit_code = EXIT_USAGE


class OutputError(TitoError):
    """The output cannot be written (exists without overwrite, or the OS refused)."""

    exit_code = EXIT_OUTPUT


class ExportError(TitoError):
    """The samples cannot be written in the asked trainer format as they are (an option decides how)."""

    exit_code = EXIT_USAGE


#: The operating system's refusals that mean "the output cannot be written" wherever they arise: an
#: ``OSError`` with one of these that reaches the CLI is exit 5, never an internal error.
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS})


def write_error(exc: OSError, file: str | os.PathLike[str] | None = None) -> OutputError:
    """The :class:`OutputError` (exit 5) for ``exc``, raised while writing ``file`` (else the file ``exc`` names)."""
    where = file if file is not None else exc.filename
    return OutputError(f"cannot write ({exc.strerror or exc})", file=None if where is None else os.fspath(where))
