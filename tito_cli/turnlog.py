"""Reading a turn log (SPEC §2): find the files, tell turns from sessions, validate, group.

    log = TurnLog.open(["logs/"])          # reads footers only; bad files fail here
    infos, session_rejects = log.read_sessions()
    for rows in log.iter_sessions():        # one session at a time, in session-id order
        turns = parse_session(rows)         # raises InvalidSessionError

Files that cannot be used at all (not Parquet, truncated, wrong schema)
raise :class:`~tito_cli.errors.LogError` naming the file; a session whose
rows break the contract raises :class:`~tito_cli.errors.InvalidSessionError`
naming the file, row and reason, and only that session is lost.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import InvalidSessionError, SchemaError, UnreadableLogError
from .schema import META_TABLE, META_TOKENIZER
from .turns import Message, RowRef, SessionInfo, Turn, canonical_json

__all__ = [
    "LogFile",
    "SessionRows",
    "TurnLog",
    "discover_files",
    "parse_session",
]

INT32_MAX = 2**31 - 1

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
}
_SESSIONS_COLUMNS: dict[str, tuple[str, bool]] = {
    "session_id": ("string", True),
    "reward": ("number", False),
    "index": ("integer", False),
    "group_index": ("integer", False),
    "label": ("string", False),
    "metadata": ("string", False),
}
_TYPE_NAMES = {
    "string": "string",
    "integer": "an integer type",
    "number": "a numeric type",
    "int_list": "list<int32>",
    "float_list": "list<float32> or list<float64>",
    "timestamp": "timestamp",
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
    if pa.types.is_null(t):
        return kind == "float_list"
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    value = t.value_type
    if kind == "int_list":
        return bool(pa.types.is_integer(value))
    return bool(pa.types.is_floating(value) or pa.types.is_null(value))


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
    """Every ``*.parquet`` file under ``paths`` (files given directly are taken as they are)."""
    excluded = {p.resolve() for p in exclude}
    found: set[Path] = set()
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            candidates = [p for p in path.rglob("*.parquet") if p.is_file() and not p.name.startswith(".")]
        elif path.is_file():
            candidates = [path]
        else:
            raise UnreadableLogError("no such file or directory", file=path)
        found.update(p for p in candidates if p.resolve() not in excluded)
    return sorted(found, key=lambda p: str(p))


def classify_file(path: Path) -> LogFile:
    """Read a file's footer and decide which table it holds; raise if it is neither."""
    try:
        parquet = pq.ParquetFile(path)
        schema = parquet.schema_arrow
        num_rows = parquet.metadata.num_rows
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"not a readable Parquet file ({exc})", file=path) from None
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
                tip="turn logs are written by tito_cli.capture.TurnLogWriter; see SPEC §2",
            )
    if table not in ("turns", "sessions"):
        raise SchemaError(
            f"holds a {table!r} table, not turns or sessions",
            file=path,
            tip="keep rebuilt samples outside the log folder, or pass the log files explicitly",
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
    return LogFile(path, table, num_rows, columns, meta.get(META_TOKENIZER))


@dataclass(slots=True)
class RawTurn:
    """One turns row before validation; ids are numpy views into the read columns."""

    seq: int | None
    prompt_ids: np.ndarray | None
    output_ids: np.ndarray | None
    output_logprobs: np.ndarray | None
    finish_reason: str | None
    prompt_messages: str | None
    response_message: str | None
    tools: str | None
    metadata: str | None
    source: RowRef


@dataclass(slots=True)
class SessionRows:
    session_id: str
    rows: list[RawTurn] = field(default_factory=list)


@dataclass(slots=True)
class SessionsTable:
    """The sessions rows, by session id; conflicting duplicates are reported, not guessed."""

    infos: dict[str, SessionInfo]
    #: session id -> reason, for rows that cannot be used (conflicts, bad metadata).
    invalid: dict[str, tuple[str, RowRef]]


class TurnLog:
    """A set of turn-log files, classified and schema-checked."""

    def __init__(self, files: Sequence[LogFile]) -> None:
        self.files = list(files)
        self.turn_files = [f for f in self.files if f.table == "turns"]
        self.session_files = [f for f in self.files if f.table == "sessions"]

    @classmethod
    def open(cls, paths: Iterable[str | Path], *, exclude: Iterable[Path] = ()) -> TurnLog:
        return cls([classify_file(p) for p in discover_files(paths, exclude=exclude)])

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer recorded by the writer (the first one found, in file order)."""
        for f in self.turn_files:
            if f.tokenizer:
                return f.tokenizer
        return None

    @property
    def num_turn_rows(self) -> int:
        return sum(f.num_rows for f in self.turn_files)

    def read_sessions(self) -> SessionsTable:
        infos: dict[str, SessionInfo] = {}
        invalid: dict[str, tuple[str, RowRef]] = {}
        for log_file in self.session_files:
            table = _read(log_file)
            cols = {name: table.column(name).to_pylist() for name in log_file.columns}
            for row in range(table.num_rows):
                ref = RowRef(str(log_file.path), row)
                sid = cols["session_id"][row]
                if sid is None:
                    raise SchemaError("session_id is null", file=log_file.path, row=row)
                try:
                    info = _session_info(cols, row, ref)
                except ValueError as exc:
                    invalid.setdefault(sid, (str(exc), ref))
                    continue
                previous = infos.get(sid)
                if previous is not None and _info_values(previous) != _info_values(info):
                    assert previous.source is not None
                    invalid.setdefault(
                        sid, (f"conflicting sessions rows (the other is {previous.source})", ref)
                    )
                    continue
                infos.setdefault(sid, info)
        for sid in invalid:
            infos.pop(sid, None)
        return SessionsTable(infos, invalid)

    def session_ids(self) -> list[str]:
        """Every session id that has turns, in code-point order."""
        ids: set[str] = set()
        for log_file in self.turn_files:
            try:
                column = pq.read_table(log_file.path, columns=["session_id"]).column("session_id")
            except (OSError, pa.ArrowException) as exc:
                raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
            ids.update(v for v in pc.unique(column).to_pylist() if v is not None)
        return sorted(ids)

    def iter_sessions(self, only: set[str] | None = None) -> Iterator[SessionRows]:
        """Every session's raw rows (or those in ``only``), in code-point order of id, rows in ``seq`` order."""
        tables = []
        for number, log_file in enumerate(self.turn_files):
            table = _read(log_file)
            if only is not None:
                table = table.filter(pc.is_in(table.column("session_id"), pa.array(sorted(only), pa.string())))
            if table.num_rows == 0:
                continue
            if table.column("session_id").null_count:
                row = table.column("session_id").to_pylist().index(None)
                raise SchemaError("session_id is null", file=log_file.path, row=row)
            table = _normalise_turns(table)
            table = table.append_column("_file", pa.array(np.full(table.num_rows, number, np.int32)))
            table = table.append_column("_row", pa.array(np.arange(table.num_rows, dtype=np.int64)))
            tables.append(table)
        if not tables:
            return
        table = pa.concat_tables(tables)
        order = pc.sort_indices(
            table,
            sort_keys=[("session_id", "ascending"), ("seq", "ascending"), ("_file", "ascending"), ("_row", "ascending")],
        )
        table = table.take(order).combine_chunks()
        yield from _split_sessions(table, [str(f.path) for f in self.turn_files])


def _read(log_file: LogFile) -> pa.Table:
    try:
        return pq.read_table(log_file.path, columns=list(log_file.columns))
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None


def _normalise_turns(table: pa.Table) -> pa.Table:
    """Give every turns table the same columns and types, so files can be concatenated."""
    columns = {}
    for name in _TURNS_COLUMNS:
        if name in table.column_names:
            columns[name] = table.column(name)
    n = table.num_rows
    target = {
        "session_id": pa.string(),
        "seq": pa.int64(),
        "prompt_ids": pa.large_list(pa.int64()),
        "output_ids": pa.large_list(pa.int64()),
        "output_logprobs": pa.large_list(pa.float64()),
        "finish_reason": pa.string(),
        "prompt_messages": pa.large_string(),
        "response_message": pa.large_string(),
        "tools": pa.large_string(),
        "metadata": pa.large_string(),
    }
    out = {}
    for name, typ in target.items():
        if name in columns:
            out[name] = columns[name].cast(typ)
        else:
            out[name] = pa.nulls(n, typ)
    return pa.table(out)


def _split_sessions(table: pa.Table, file_names: list[str]) -> Iterator[SessionRows]:
    session_ids = table.column("session_id").to_pylist()
    seqs = table.column("seq").to_pylist()
    files = table.column("_file").to_numpy()
    rows = table.column("_row").to_numpy()
    lists = {}
    for name in ("prompt_ids", "output_ids", "output_logprobs"):
        array = table.column(name).chunk(0) if table.column(name).num_chunks else None
        lists[name] = _ListColumn(array)
    strings = {
        name: table.column(name).to_pylist()
        for name in ("finish_reason", "prompt_messages", "response_message", "tools", "metadata")
    }
    current: SessionRows | None = None
    for i, sid in enumerate(session_ids):
        if current is None or current.session_id != sid:
            if current is not None:
                yield current
            current = SessionRows(sid)
        current.rows.append(
            RawTurn(
                seq=seqs[i],
                prompt_ids=lists["prompt_ids"].get(i),
                output_ids=lists["output_ids"].get(i),
                output_logprobs=lists["output_logprobs"].get(i),
                finish_reason=strings["finish_reason"][i],
                prompt_messages=strings["prompt_messages"][i],
                response_message=strings["response_message"][i],
                tools=strings["tools"][i],
                metadata=strings["metadata"][i],
                source=RowRef(file_names[files[i]], int(rows[i])),
            )
        )
    if current is not None:
        yield current


class _ListColumn:
    """Row access to a list column as numpy slices, without converting values to Python."""

    def __init__(self, array: pa.Array | None) -> None:
        self.valid = None if array is None else np.asarray(array.is_valid())
        if array is None:
            self.offsets = self.values = None
        else:
            self.offsets = array.offsets.to_numpy()
            self.values = array.values.to_numpy(zero_copy_only=False)

    def get(self, i: int) -> np.ndarray | None:
        if self.valid is None or not self.valid[i]:
            return None
        assert self.offsets is not None and self.values is not None
        return self.values[self.offsets[i] : self.offsets[i + 1]]


def _session_info(cols: dict[str, list[Any]], row: int, ref: RowRef) -> SessionInfo:
    def get(name: str) -> Any:
        column = cols.get(name)
        return None if column is None else column[row]

    reward = get("reward")
    reward = 0.0 if reward is None else float(reward)
    if not math.isfinite(reward):
        raise ValueError(f"reward is {reward}")
    metadata = get("metadata")
    parsed_meta = None
    if metadata is not None:
        try:
            parsed_meta = json.loads(metadata)
        except json.JSONDecodeError as exc:
            raise ValueError(f"sessions metadata is not valid JSON ({exc})") from None
        if not isinstance(parsed_meta, dict):
            raise ValueError("sessions metadata is not a JSON object")
    return SessionInfo(
        reward=reward,
        index=get("index"),
        group_index=get("group_index"),
        label=get("label"),
        metadata=parsed_meta,
        source=ref,
    )


def _info_values(info: SessionInfo) -> tuple[Any, ...]:
    return (info.reward, info.index, info.group_index, info.label, canonical_json(info.metadata))


# -- validation of one session ------------------------------------------------


class _MessageParser:
    """Parses ``prompt_messages`` JSON, reusing the previous turn's work.

    A session's prompts mostly extend the previous prompt by a few messages.
    When the raw JSON text starts with an earlier prompt's text minus its
    closing bracket, followed by a comma, only the new tail is parsed and
    canonicalised (JSON is parsed left to right, so the shared prefix means
    the same messages).
    """

    def __init__(self) -> None:
        self._recent: list[tuple[str, list[Message], list[str]]] = []

    def parse(self, raw: str) -> tuple[list[Message], list[str]]:
        for prev_raw, prev_messages, prev_keys in self._recent:
            head = prev_raw.rstrip()
            if not prev_messages or not head.endswith("]"):
                continue
            head = head[:-1]
            if raw.startswith(head):
                rest = raw[len(head) :].lstrip()
                if rest == "]":
                    messages, keys = prev_messages, prev_keys
                    break
                if rest.startswith(","):
                    try:
                        tail = json.loads("[" + rest[1:])
                    except json.JSONDecodeError:
                        continue  # the full parse below reports the error at its true position
                    if not tail:
                        # "[a, b,]": a trailing comma, not JSON.  Let the full parse say so.
                        continue
                    messages = prev_messages + tail
                    keys = prev_keys + [canonical_json(m) if isinstance(m, dict) else "" for m in tail]
                    break
        else:
            messages = json.loads(raw)
            if not isinstance(messages, list):
                raise ValueError("prompt_messages is not a JSON array")
            keys = [canonical_json(m) if isinstance(m, dict) else "" for m in messages]
        self._recent.insert(0, (raw, messages, keys))
        del self._recent[4:]
        return messages, keys


def _parse_json(raw: str | None, what: str, expected: type | None) -> Any:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON ({exc})") from None
    # JSON null means the same as a null cell: these columns are all nullable.
    if expected is not None and value is not None and not isinstance(value, expected):
        raise ValueError(f"{what} is not a JSON {'object' if expected is dict else 'array'}")
    return value


def _ids(values: np.ndarray | None, what: str) -> np.ndarray:
    if values is None:
        raise ValueError(f"{what} is null")
    if values.size and (values.min() < 0 or values.max() > INT32_MAX):
        bad = values[(values < 0) | (values > INT32_MAX)][0]
        raise ValueError(f"{what} holds {int(bad)}, outside 0..{INT32_MAX}")
    return values.astype(np.int32)


def parse_session(rows: SessionRows) -> list[Turn]:
    """Validate one session's raw rows into turns (``seq`` order); raise on the first problem."""
    turns: list[Turn] = []
    parser = _MessageParser()
    seen: dict[int, RowRef] = {}
    for raw in rows.rows:
        try:
            if raw.seq is None:
                raise ValueError("seq is null")
            if raw.seq in seen:
                raise ValueError(f"duplicate seq {raw.seq} (also at {seen[raw.seq]})")
            seen[raw.seq] = raw.source
            prompt_ids = _ids(raw.prompt_ids, "prompt_ids")
            output_ids = _ids(raw.output_ids, "output_ids")
            if raw.finish_reason is None:
                raise ValueError("finish_reason is null")
            if raw.prompt_messages is None:
                raise ValueError("prompt_messages is null")
            try:
                messages, keys = parser.parse(raw.prompt_messages)
            except json.JSONDecodeError as exc:
                raise ValueError(f"prompt_messages is not valid JSON ({exc})") from None
            for position, message in enumerate(messages):
                if not isinstance(message, dict):
                    raise ValueError(f"prompt message {position} is not a JSON object")
                if not isinstance(message.get("role"), str):
                    raise ValueError(f"prompt message {position} has no string 'role'")
            response = _parse_json(raw.response_message, "response_message", dict)
            tools = _parse_json(raw.tools, "tools", list)
            metadata = _parse_json(raw.metadata, "metadata", dict)
            logprobs = raw.output_logprobs
            if logprobs is not None and logprobs.size == 0:
                logprobs = None
            if logprobs is not None:
                if messages and logprobs.size != output_ids.size:
                    raise ValueError(
                        "output_logprobs length differs from output_ids length "
                        f"({logprobs.size} logprobs, {output_ids.size} output ids)"
                    )
                if not np.isfinite(logprobs).all():
                    raise ValueError("output_logprobs holds NaN or infinity")
                logprobs = logprobs.astype(np.float32)
        except ValueError as exc:
            raise InvalidSessionError(
                str(exc), file=raw.source.file, row=raw.source.row, session_id=rows.session_id
            ) from None
        turns.append(
            Turn(
                seq=raw.seq,
                prompt_ids=prompt_ids,
                output_ids=output_ids,
                output_logprobs=logprobs,
                finish_reason=raw.finish_reason,
                prompt_messages=messages,
                response_message=response,
                tools=tools,
                metadata=metadata,
                source=raw.source,
                message_keys=keys,
            )
        )
    return turns
