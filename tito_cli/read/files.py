"""The files of a turn log (SPEC §2): find them, and tell turns tables from sessions tables.

Reads footers only.  A file that is not Parquet, is truncated, or holds
neither table raises :class:`~tito_cli.errors.LogError` naming it, before
anything is rebuilt.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .._parquet import open_parquet_file
from ..errors import LogError, SchemaError, UnreadableLogError
from ..schema import FORMAT_VERSIONS, META_FORMAT, META_TABLE, META_TOKENIZER, REFERENCE_COLUMNS
from .journals import journal_tables

__all__ = [
    "READ_COLUMNS",
    "LogFile",
    "check_sessions_given",
    "classify_file",
    "discover_files",
    "open_parquet",
    "require_logs",
]

# Column -> check of its Arrow type, and whether a turns/sessions file must have it.
_TURNS_COLUMNS: dict[str, tuple[str, bool]] = {
    "session_id": ("string", True),
    "seq": ("integer", True),
    "prompt_ids": ("int_list", True),
    "output_ids": ("int_list", True),
    "output_logprobs": ("float_list", False),
    "finish_reason": ("string", True),
    "prompt_messages": ("string", True),
    "response_message": ("string", False),
    "tools": ("string", False),
    "metadata": ("string", False),
    "timestamp": ("timestamp", False),
    # Format 2 (docs/spec.md §9): all three or none.
    "base_seq": ("integer", False),
    "shared_prompt_ids": ("integer", False),
    "shared_messages": ("integer", False),
    "ill_formed": ("boolean", False),
    # Provenance (docs/spec.md §2): optional, in either format.
    "weight_versions": ("string", False),
    "sampling": ("string", False),
    "call_kind": ("string", False),
    "routed_experts": ("binary", False),
    "routed_experts_start": ("integer", False),
    "routed_experts_layers": ("integer", False),
    "routed_experts_topk": ("integer", False),
}
_SESSIONS_COLUMNS: dict[str, tuple[str, bool]] = {
    "session_id": ("string", True),
    "reward": ("number", False),
    "index": ("integer", False),
    "group_index": ("integer", False),
    "label": ("string", False),
    "metadata": ("string", False),
    "rollout_id": ("integer", False),
}
_TYPE_NAMES = {
    "string": "string",
    "integer": "an integer type",
    "number": "a numeric type",
    "int_list": "list<int32>",
    "float_list": "list<float32> or list<float64>",
    "timestamp": "timestamp",
    "boolean": "bool",
    "binary": "binary",
}


def _type_ok(kind: str, t: pa.DataType) -> bool:
    if kind == "string":
        return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_null(t))
    if kind == "integer":
        return bool(pa.types.is_integer(t) or pa.types.is_null(t))
    if kind == "number":
        return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_null(t))
    if kind == "timestamp":
        return bool(pa.types.is_timestamp(t) or pa.types.is_null(t))
    if kind == "binary":
        return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_null(t))
    if kind == "boolean":
        return bool(pa.types.is_boolean(t) or pa.types.is_null(t))
    if pa.types.is_null(t):
        return kind == "float_list"
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    value = t.value_type
    if kind == "int_list":
        return bool(pa.types.is_integer(value))
    return bool(pa.types.is_floating(value) or pa.types.is_null(value))


#: The columns a rebuild reads from a turns file (``timestamp`` is not needed).
READ_COLUMNS = tuple(name for name in _TURNS_COLUMNS if name != "timestamp")


@dataclass(frozen=True, slots=True)
class LogFile:
    path: Path
    #: ``turns`` or ``sessions``.
    table: str
    num_rows: int
    #: The columns of interest this file has.
    columns: tuple[str, ...]
    tokenizer: str | None = None


def discover_files(paths: Iterable[str | Path], *, exclude: Iterable[Path] = ()) -> list[Path]:
    """Every ``*.parquet`` file under ``paths`` (files given directly are taken as they are), each real file once.

    A live ``tito serve``'s journal segments in a folder are read as files too (:mod:`.journals`).

    Folders are searched recursively, following symbolic links to folders
    (a folder reached twice, as by a link loop, is searched once); a folder
    that cannot be listed raises naming it, since its sessions would
    otherwise be missing without a word.  A file reached by two spellings
    (``logs`` and ``$PWD/logs``, or a symlink to a file of the log) is read
    once, by the first spelling in sorted order.  ``exclude``: files to
    leave out (a rebuild's own output).  Files are told apart by device and
    inode, one ``stat`` each (resolving every path costs a system call per
    path component; docs/performance.md).
    """
    excluded = {_file_id(p) for p in exclude}
    found: dict[tuple[int, int], Path] = {}
    seen_folders: set[tuple[int, int]] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = _parquet_files(path, seen_folders)
        elif path.is_file():
            candidates = [path]
        elif path.exists() or path.is_symlink():
            raise UnreadableLogError("not a regular file or folder (a broken link, a device, a FIFO?)", file=path)
        else:
            raise UnreadableLogError("no such file or directory", file=path)
        for candidate in candidates:
            file_id = _file_id(candidate)
            if file_id is None or file_id in excluded:
                continue
            if file_id not in found or str(candidate) < str(found[file_id]):
                found[file_id] = candidate
    return sorted(found.values(), key=lambda p: str(p))


def _parquet_files(folder: Path, seen_folders: set[tuple[int, int]]) -> list[Path]:
    """The non-hidden ``*.parquet`` files under ``folder``, following folder links, each folder once."""

    def unreadable(error: OSError) -> None:
        raise UnreadableLogError(f"cannot list this folder ({error.strerror or error})", file=error.filename)

    files: list[Path] = []
    for top, folders, names in os.walk(folder, onerror=unreadable, followlinks=True):
        status = os.stat(top)
        key = (status.st_dev, status.st_ino)
        if key in seen_folders:
            folders[:] = []  # reached before (a link loop, or two links to one folder)
            continue
        seen_folders.add(key)
        folders.sort()
        files.extend(Path(top, name) for name in names if name.endswith(".parquet") and not name.startswith("."))
        if any(name.startswith(".tito-journal-") for name in names):
            files.extend(journal_tables(Path(top)))  # a live gateway's acknowledged turns (read/journals.py)
    return files


def require_logs(found: list[Path], paths: Iterable[str | Path]) -> list[Path]:
    """``found`` (from :func:`discover_files`), or an error naming ``paths`` when it is empty.

    A mistyped or wrong folder must not rebuild into an empty samples file that exits 0.
    """
    if found:
        return found
    paths = list(paths)
    where = ", ".join(str(p) for p in paths) or "(no path given)"
    if any(Path(p).is_dir() and any(Path(p).glob(".tito-journal-*.wal")) for p in paths):
        raise LogError(
            "a tito serve is recording into this folder and has not recorded a turn yet",
            file=where,
            tip="read it again once the gateway has answered a generation request",
        )
    if paths and all(_not_written_yet(Path(p)) for p in paths):
        raise LogError(
            "no turn-log Parquet file here yet: the folder holds no files but hidden ones, as a log folder does "
            "while a writer (tito serve, TurnLogWriter) has not recorded its first turns",
            file=where,
            tip="tito serve's turns are readable as soon as they are answered; a TurnLogWriter's first Parquet "
            "file appears at its first flush",
        )
    raise LogError(
        "no turn-log Parquet file found here (searched recursively for *.parquet)",
        file=where,
        tip="tito reads the Parquet turn logs TurnLogWriter writes (docs/capture.md); "
        "convert logs in another format with tito import",
    )


def _not_written_yet(path: Path) -> bool:
    """A folder holding nothing but hidden entries (a writer's temporaries, journals) or nothing at all."""
    try:
        return path.is_dir() and all(name.startswith(".") for name in os.listdir(path))
    except OSError:
        return False


def _file_id(path: Path) -> tuple[int, int] | None:
    """(device, inode) of a regular file, following links; ``None`` for anything else or nothing."""
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) else None


def open_parquet(path: Path) -> pq.ParquetFile:
    """A log file opened, its footer and schema read; raise naming it if it is not readable Parquet.

    Opened for the index pass, which reads two small column chunks a file:
    pyarrow's read-ahead (``pre_buffer``: coalesced ranges fetched on its IO
    threads) costs more than it saves there (docs/performance.md).
    """
    try:
        parquet = open_parquet_file(path, pre_buffer=False)
        parquet.schema_arrow  # noqa: B018 - converting the schema fails here on a type Arrow cannot read
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"not a readable Parquet file ({exc})", file=path) from None
    return parquet


def classify_file(path: Path, parquet: pq.ParquetFile | None = None) -> LogFile:
    """Read a file's footer and decide which table it holds; raise if it is neither.

    ``parquet``: the file already opened by :func:`open_parquet`, when the
    caller reads more of it (``TurnLog.open(index=True)``), so that its
    footer is read once.
    """
    if parquet is None:
        parquet = open_parquet(path)
    schema = parquet.schema_arrow
    num_rows = parquet.metadata.num_rows
    meta = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in (schema.metadata or {}).items()}
    names = set(schema.names)
    if len(names) != len(schema.names):
        # Which one would a reader take?  Neither: refuse the file.
        twice = sorted(n for n in names if schema.names.count(n) > 1)
        raise SchemaError(f"column {twice[0]!r} appears {schema.names.count(twice[0])} times", file=path)
    table = meta.get(META_TABLE)
    if table is None:
        if "seq" in names and "prompt_ids" in names:
            table = "turns"
        elif "reward" in names and "seq" not in names:
            table = "sessions"
        else:
            raise SchemaError(
                "neither a turns table (needs seq and prompt_ids) nor a sessions table (needs reward)",
                file=path,
                tip="turn logs are written by tito_cli.capture.writer.TurnLogWriter; see docs/spec.md §2",
            )
    elif table == "sessions" and "seq" in names and "prompt_ids" in names:
        # Read as sessions rows, its turns would be dropped without a word.
        raise SchemaError(
            "tito.table says sessions, but the file has a turns table's columns (seq, prompt_ids)",
            file=path,
            tip="fix the file's tito.table metadata",
        )
    if table not in ("turns", "sessions"):
        raise SchemaError(
            f"holds a {table!r} table, not turns or sessions",
            file=path,
            tip="keep rebuilt samples outside the log folder, or pass the log files explicitly",
        )
    # Formats 1 and 2 (docs/spec.md §9) are what this reader understands; a file recognised by
    # its columns carries no format.
    file_format = meta.get(META_FORMAT)
    if file_format is not None and file_format not in FORMAT_VERSIONS:
        raise SchemaError(
            f"turn-log format {file_format!r} is not one this tito reads (formats {', '.join(FORMAT_VERSIONS)})",
            file=path,
            tip="upgrade tito to read this log",
        )
    expected = _TURNS_COLUMNS if table == "turns" else _SESSIONS_COLUMNS
    for name, (kind, required) in expected.items():
        if name not in names:
            if required:
                raise SchemaError(f"{table} table is missing required column {name!r}", file=path)
            continue
        actual = schema.field(name).type
        if not _type_ok(kind, actual):
            raise SchemaError(
                f"column {name!r} has type {actual}, expected {_TYPE_NAMES[kind]}",
                file=path,
            )
    columns = tuple(name for name in expected if name in names)
    if table == "turns":
        present = [name for name in REFERENCE_COLUMNS if name in names]
        if present and len(present) < len(REFERENCE_COLUMNS):
            missing = next(name for name in REFERENCE_COLUMNS if name not in names)
            raise SchemaError(
                f"turns table has {present[0]!r} but not {missing!r} (format 2 needs all of "
                f"{', '.join(REFERENCE_COLUMNS)})",
                file=path,
                tip="see docs/spec.md §9",
            )
    return LogFile(path, table, num_rows, columns, meta.get(META_TOKENIZER))


def check_sessions_given(paths: Iterable[str | Path], found: Iterable[LogFile]) -> None:
    """Raise :class:`LogError` when files were given one by one, none a sessions table, and one lies beside them.

    ``tito rebuild logs/turns-*.parquet`` (a natural glob) leaves the
    sessions files out: every session would be rebuilt at reward 0.0 without a
    word, and a trainer would learn from those zeros.  Folders are searched
    whole, so only files given directly can leave a sessions file out.
    """
    given = [Path(p) for p in paths]
    files = list(found)
    if any(f.table == "sessions" for f in files) or not all(p.is_file() for p in given):
        return
    taken = {_file_id(f.path) for f in files}
    for folder in sorted({p.parent for p in given}):
        for candidate in sorted(folder.glob("*.parquet")):
            if candidate.name.startswith(".") or _file_id(candidate) in taken:
                continue
            try:
                kind = classify_file(candidate).table
            except LogError:
                continue
            if kind == "sessions":
                raise LogError(
                    f"the files given hold no sessions table, but {candidate} is one: without it every session "
                    "would be rebuilt at reward 0.0",
                    file=folder,
                    tip=f"give the folder ({folder}) or add its sessions files (e.g. {folder}/sessions-*.parquet)",
                )
