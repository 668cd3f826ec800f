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
import pyarrow.parquet as pq

from .arrow import NUMPY_TYPES, numpy_view, validity
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
        self._index: LogIndex | None = None

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
        return self.index().session_ids

    def index(self, only: set[str] | None = None) -> LogIndex:
        """Where every session's rows are (first pass: ``session_id`` and ``seq`` only).

        The whole log's index is cached; an ``only`` index is built afresh.
        """
        if only is None and self._index is not None:
            return self._index
        index = build_index(self.turn_files, only)
        if only is None:
            self._index = index
        return index

    def iter_sessions(self, only: set[str] | None = None) -> Iterator[SessionRows]:
        """Every session's raw rows (or those in ``only``), in code-point order of id, rows in ``seq`` order.

        Row groups are read when a session first needs them and dropped after
        the last session that needs them, so memory follows the sessions being
        read, not the log (for logs whose sessions are interleaved in id
        order; the rebuild's log-order batches, :meth:`LogIndex.batches`,
        bound it for any log).
        """
        index = self.index(only)
        yield from read_batch(self.turn_files, ReadBatch(index.row_groups, index.in_id_order()))


# -- the read path ------------------------------------------------------------
#
# Reading is two passes.  The first (``build_index``) reads only ``session_id``
# and ``seq`` and records, per session, the row groups and rows that hold its
# turns, in ``seq`` order.  The second (``read_batch``) reads the other columns
# one row group at a time, only for the row groups a batch of sessions needs,
# and hands out each row's ids as numpy views into the decoded column: nothing
# is sorted, taken, cast or converted to Python lists.

#: The columns a rebuild reads from a turns file (``timestamp`` is not needed).
READ_COLUMNS = tuple(name for name in _TURNS_COLUMNS if name != "timestamp")
_LIST_COLUMNS = ("prompt_ids", "output_ids", "output_logprobs")
_STRING_COLUMNS = ("finish_reason", "prompt_messages", "response_message", "tools", "metadata")


@dataclass(frozen=True, slots=True)
class RowGroup:
    """One row group of a turns file."""

    file: int  # position in the turn-file list
    index: int  # row group number inside the file
    first_row: int  # file row number of its first row (for error messages)
    num_rows: int
    #: Uncompressed size of the columns read, per row (a planning estimate).
    bytes_per_row: float


@dataclass(slots=True)
class SessionPlace:
    """Where one session's rows are, in ``seq`` order (ties: file, then row)."""

    session_id: str
    #: Per row: the global row-group number (into ``LogIndex.row_groups``) and the row inside it.
    groups: np.ndarray
    rows: np.ndarray
    #: Estimated decoded size of the session's rows.
    nbytes: int

    @property
    def last_group(self) -> int:
        return int(self.groups.max())


@dataclass(slots=True)
class ReadBatch:
    """Sessions to read together, in the order they are to be handed out."""

    row_groups: list[RowGroup]
    sessions: list[SessionPlace]

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.sessions)


@dataclass(slots=True)
class LogIndex:
    row_groups: list[RowGroup]
    #: By session id.
    places: dict[str, SessionPlace]

    @property
    def session_ids(self) -> list[str]:
        return sorted(self.places)

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.places.values())

    def in_id_order(self) -> list[SessionPlace]:
        return [self.places[sid] for sid in self.session_ids]

    def in_log_order(self) -> list[SessionPlace]:
        """Sessions in the order their last row appears in the log (ties by id).

        A log is written in time order, so this is the order sessions finish:
        consecutive sessions share row groups, and a batch of them reads few
        row groups that another batch also reads.
        """
        return sorted(self.places.values(), key=lambda p: (p.last_group, p.session_id))

    def batches(self, target_bytes: float) -> list[ReadBatch]:
        """Cut the sessions, in log order, into batches of about ``target_bytes`` decoded bytes.

        A cut between two batches that both need a row group makes both decode
        it, so a batch that has reached its size is closed at the next *clean*
        cut (no later session reads a row group an earlier one read), unless
        none comes before it has grown to twice its size.
        """
        order = self.in_log_order()
        if not order:
            return []
        # Clean cut after position k: every row group used so far lies before every
        # row group used from k + 1 on.
        highest_so_far = np.maximum.accumulate([int(p.groups.max()) for p in order])
        lowest_after = np.minimum.accumulate([int(p.groups.min()) for p in reversed(order)])[::-1]
        clean = np.append(highest_so_far[:-1] < lowest_after[1:], True)
        batches: list[ReadBatch] = []
        current: list[SessionPlace] = []
        size = 0
        for k, place in enumerate(order):
            current.append(place)
            size += place.nbytes
            if size >= 2 * target_bytes or (size >= target_bytes and clean[k]):
                batches.append(ReadBatch(self.row_groups, current))
                current, size = [], 0
        if current:
            batches.append(ReadBatch(self.row_groups, current))
        return batches


def build_index(files: Sequence[LogFile], only: set[str] | None = None) -> LogIndex:
    """First pass over the turns files: where each session's rows are."""
    row_groups: list[RowGroup] = []
    codes: dict[str, int] = {}
    parts: list[tuple[np.ndarray, ...]] = []
    for number, log_file in enumerate(files):
        try:
            parquet = pq.ParquetFile(log_file.path)
            table = parquet.read(columns=["session_id", "seq"], use_threads=False)
        except (OSError, pa.ArrowException) as exc:
            raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
        sids = table.column("session_id").combine_chunks()
        n = len(sids)
        # Row groups of this file, and each row's group and row inside it.
        group_of_row = np.empty(n, dtype=np.int32)
        row_in_group = np.empty(n, dtype=np.int64)
        first = 0
        for g in range(parquet.metadata.num_row_groups):
            meta = parquet.metadata.row_group(g)
            size = sum(
                meta.column(c).total_uncompressed_size
                for c in range(meta.num_columns)
                if meta.column(c).path_in_schema.split(".")[0] in READ_COLUMNS
            )
            rows = meta.num_rows
            group_of_row[first : first + rows] = len(row_groups)
            row_in_group[first : first + rows] = np.arange(rows)
            row_groups.append(RowGroup(number, g, first, rows, size / max(rows, 1)))
            first += rows
        keep = np.ones(n, dtype=bool)
        if sids.null_count:
            valid = validity(sids)
            if only is None:
                raise SchemaError("session_id is null", file=log_file.path, row=int(np.argmin(valid)))
            keep &= valid
        # Session ids -> small integers in first-seen order (a null id maps to 0; `keep`
        # drops it).  A dict over the column's values: this pass reads one short
        # string per turn, and pyarrow.compute would add ~50 ms of start-up to
        # every command.
        local_of: dict[str, int] = {}
        local = np.fromiter(
            (0 if sid is None else local_of.setdefault(sid, len(local_of)) for sid in sids.to_pylist()),
            dtype=np.int64,
            count=n,
        )
        unique_ids = list(local_of)
        if only is not None:
            wanted = np.array([sid in only for sid in unique_ids] or [False])
            keep &= wanted[local]
        to_global = np.array([codes.setdefault(sid, len(codes)) for sid in unique_ids] or [0], dtype=np.int64)
        seq_values, seq_valid = _int64_values(table.column("seq").combine_chunks())
        seq_null = ~seq_valid
        file_rows = np.arange(n, dtype=np.int64)
        parts.append(
            tuple(
                a[keep]
                for a in (to_global[local], seq_null, seq_values, np.full(n, number), file_rows,
                          group_of_row, row_in_group)
            )
        )
    places: dict[str, SessionPlace] = {}
    if not parts:
        return LogIndex(row_groups, places)
    columns = (np.concatenate(c) for c in zip(*parts, strict=True))
    code, seq_null, seq_values, file_no, file_row, group, row = columns
    # Rows in seq order (a null seq sorts last, where validation reports it), ties by file and row.
    order = np.lexsort((file_row, file_no, seq_values, seq_null, code))
    code, group, row = code[order], group[order], row[order]
    bytes_per_row = np.array([g.bytes_per_row for g in row_groups] or [0.0])
    row_bytes = bytes_per_row[group]
    starts = np.flatnonzero(np.diff(code, prepend=-1))
    ends = np.append(starts[1:], len(code))
    ids = {c: sid for sid, c in codes.items()}
    for lo, hi in zip(starts, ends, strict=False):
        sid = ids[int(code[lo])]
        places[sid] = SessionPlace(sid, group[lo:hi], row[lo:hi], int(row_bytes[lo:hi].sum()))
    return LogIndex(row_groups, places)


def read_batch(files: Sequence[LogFile], batch: ReadBatch) -> Iterator[SessionRows]:
    """Each session of ``batch`` as raw rows, in batch order; row groups are read lazily, once.

    A row group's decoded columns stay alive until the last session of the
    batch that needs it has been handed out (the consumer is done with a
    session when it asks for the next one).
    """
    last_user: dict[int, int] = {}
    for position, place in enumerate(batch.sessions):
        for g in np.unique(place.groups).tolist():
            last_user[g] = position
    loaded: dict[int, _Columns] = {}
    for position, place in enumerate(batch.sessions):
        session = SessionRows(place.session_id)
        for g, r in zip(place.groups.tolist(), place.rows.tolist(), strict=False):
            columns = loaded.get(g)
            if columns is None:
                columns = loaded[g] = _load_group(files, batch.row_groups[g])
            session.rows.append(columns.row(r))
        yield session
        for g in [g for g in loaded if last_user[g] == position]:
            del loaded[g]


def _int64_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as (int64 values, validity); values at null slots are 0."""
    valid = validity(array)
    if pa.types.is_null(array.type):
        return np.zeros(len(array), dtype=np.int64), valid
    # (cast goes through pyarrow.compute, a 50 ms import: skip it when there is nothing to do)
    cast = array if pa.types.is_int64(array.type) else array.cast(pa.int64())
    # Straight from the data buffer: exact for any int64, and no float detour for nulls.
    values = np.frombuffer(cast.buffers()[1], dtype=np.int64, count=cast.offset + len(cast))[cast.offset :]
    if array.null_count:
        values = np.where(valid, values, 0)
    return values, valid


def _load_group(files: Sequence[LogFile], group: RowGroup) -> _Columns:
    log_file = files[group.file]
    try:
        # Opened per row group, not kept: an open ParquetFile holds on to buffers it has read.
        with pq.ParquetFile(log_file.path) as parquet:
            columns = [name for name in READ_COLUMNS if name in log_file.columns]
            # One worker, one core: pyarrow's own threads would compete with the other workers.
            table = parquet.read_row_group(group.index, columns=columns, use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
    return _Columns(table, str(log_file.path), group.first_row)


class _Columns:
    """One decoded row group, handing out rows as :class:`RawTurn` with numpy views for the ids."""

    def __init__(
        self, table: pa.Table, file_name: str, first_row: int, sources: Sequence[RowRef] | None = None
    ) -> None:
        self.file_name = file_name
        self.first_row = first_row
        #: Where each row came from, when the table is not one file's row group (the Ray engine).
        self.sources = sources
        names = table.column_names

        def array(name: str) -> pa.Array | None:
            if name not in names:
                return None
            column = table.column(name)
            return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()

        seq = array("seq")
        assert seq is not None  # a required column
        self.seq, self.seq_valid = _int64_values(seq)
        self.lists = {name: _ListColumn(array(name)) for name in _LIST_COLUMNS}
        # Whole columns to Python at once: one C loop, not a scalar object per cell.
        self.strings: dict[str, list[str | None] | None] = {}
        for name in _STRING_COLUMNS:
            column = array(name)
            self.strings[name] = None if column is None else column.to_pylist()

    def row(self, r: int) -> RawTurn:
        def text(name: str) -> str | None:
            column = self.strings[name]
            return None if column is None else column[r]

        return RawTurn(
            seq=int(self.seq[r]) if self.seq_valid[r] else None,
            prompt_ids=self.lists["prompt_ids"].get(r),
            output_ids=self.lists["output_ids"].get(r),
            output_logprobs=self.lists["output_logprobs"].get(r),
            finish_reason=text("finish_reason"),
            prompt_messages=text("prompt_messages"),
            response_message=text("response_message"),
            tools=text("tools"),
            metadata=text("metadata"),
            source=RowRef(self.file_name, self.first_row + r) if self.sources is None else self.sources[r],
        )


def rows_from_table(session_id: str, table: pa.Table, sources: Sequence[RowRef]) -> SessionRows:
    """One session's rows from an Arrow table already in ``seq`` order (``sources[i]`` names row ``i``)."""
    columns = _Columns(table, "", 0, sources)
    return SessionRows(session_id, [columns.row(r) for r in range(table.num_rows)])


class _ListColumn:
    """Row access to a list column as numpy slices, without converting values to Python."""

    def __init__(self, array: pa.Array | None) -> None:
        if array is None or pa.types.is_null(array.type):
            self.valid = self.offsets = self.values = None
            return
        self.valid = validity(array)
        offsets_type = np.int64 if pa.types.is_large_list(array.type) else np.int32
        self.offsets = numpy_view(array.buffers()[1], offsets_type, array.offset, len(array) + 1)
        values = array.values
        if values.null_count or values.type not in NUMPY_TYPES:
            self.values = values.to_numpy(zero_copy_only=False)  # rare: nulls inside a list
        else:
            dtype = NUMPY_TYPES[values.type]
            self.values = numpy_view(values.buffers()[1], dtype, values.offset, len(values))

    def get(self, i: int) -> np.ndarray | None:
        if self.valid is None or not self.valid[i]:
            return None
        assert self.offsets is not None and self.values is not None
        view: np.ndarray = self.values[self.offsets[i] : self.offsets[i + 1]]
        return view


def _read(log_file: LogFile) -> pa.Table:
    try:
        return pq.ParquetFile(log_file.path).read(columns=list(log_file.columns), use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None


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


@dataclass(slots=True)
class _ParsedPrompt:
    messages: list[Message]
    keys: list[str]
    #: Number of the earlier prompt (in parse order) this one extends, and how
    #: many of its messages it shares (all of them); ``None``/0 when parsed whole.
    source: int | None
    shared: int


class _MessageParser:
    """Parses ``prompt_messages`` JSON, reusing the previous turns' work.

    A session's prompts mostly extend the previous prompt by a few messages.
    When the raw JSON text starts with an earlier prompt's text minus its
    closing bracket, followed by a comma, only the new tail is parsed and
    canonicalised (JSON is parsed left to right, so the shared prefix means
    the same messages, as the same objects).  Each earlier prompt's "head"
    (its text without the closing bracket) is cut once, when it is
    remembered, so checking a candidate is one prefix comparison, not a copy
    of a long prompt.  The result says which earlier prompt was extended, so
    that validation and routing can skip the shared messages too.
    """

    def __init__(self) -> None:
        self._recent: list[tuple[str | None, list[Message], list[str], int]] = []
        self._count = 0

    def parse(self, raw: str) -> _ParsedPrompt:
        parsed: _ParsedPrompt | None = None
        for head, prev_messages, prev_keys, number in self._recent:
            if head is None or not raw.startswith(head):
                continue
            rest = raw[len(head) :].lstrip()
            if rest == "]":
                parsed = _ParsedPrompt(prev_messages, prev_keys, number, len(prev_messages))
                break
            if rest.startswith(","):
                try:
                    tail = json.loads("[" + rest[1:])
                except json.JSONDecodeError:
                    continue  # the full parse below reports the error at its true position
                if not tail:
                    # "[a, b,]": a trailing comma, not JSON.  Let the full parse say so.
                    continue
                keys = prev_keys + [canonical_json(m) if isinstance(m, dict) else "" for m in tail]
                parsed = _ParsedPrompt(prev_messages + tail, keys, number, len(prev_messages))
                break
        if parsed is None:
            messages = json.loads(raw)
            if not isinstance(messages, list):
                raise ValueError("prompt_messages is not a JSON array")
            keys = [canonical_json(m) if isinstance(m, dict) else "" for m in messages]
            parsed = _ParsedPrompt(messages, keys, None, 0)
        # The head is the text before the closing bracket (one copy of the prompt).
        end = len(raw)
        while end and raw[end - 1] in " \t\r\n":
            end -= 1
        head = raw[: end - 1] if parsed.messages and end and raw[end - 1] == "]" else None
        self._recent.insert(0, (head, parsed.messages, parsed.keys, self._count))
        self._count += 1
        del self._recent[4:]
        return parsed


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
    # int32 values cannot exceed the upper bound: one pass over the ids, not two.
    too_big = values.dtype.itemsize > 4 or values.dtype.kind == "u"
    if values.size and (values.min() < 0 or (too_big and values.max() > INT32_MAX)):
        bad = values[(values < 0) | (values > INT32_MAX)][0]
        raise ValueError(f"{what} holds {int(bad)}, outside 0..{INT32_MAX}")
    # Already int32 (the capture format): keep the view into the decoded column.
    return values.astype(np.int32, copy=False)


def parse_session(rows: SessionRows) -> list[Turn]:
    """Validate one session's raw rows into turns (``seq`` order); raise on the first problem."""
    turns: list[Turn] = []
    parser = _MessageParser()
    prompt_turns: list[Turn] = []  # by the parser's prompt numbers
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
                parsed = parser.parse(raw.prompt_messages)
            except json.JSONDecodeError as exc:
                raise ValueError(f"prompt_messages is not valid JSON ({exc})") from None
            messages, keys = parsed.messages, parsed.keys
            # Messages shared with an earlier prompt were checked when it was parsed.
            for position in range(parsed.shared, len(messages)):
                message = messages[position]
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
                logprobs = logprobs.astype(np.float32, copy=False)
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
        if parsed.source is not None:
            turns[-1].extends = (prompt_turns[parsed.source], parsed.shared)
        prompt_turns.append(turns[-1])
    return turns
