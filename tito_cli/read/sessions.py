"""The sessions table: each sessions row checked, the usable ones by session id, the others reported."""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .._arrow import NotUtf8, strings
from .._parquet import open_parquet_file
from ..capture.records import check_sessions_metadata, loads_json
from ..errors import SchemaError, UnreadableLogError
from ..turns import RowRef, SessionInfo, canonical_json
from .columns import INT64_MAX
from .files import LogFile
from .packed import PackedStrings

__all__ = ["SessionInfos", "SessionsTable", "read_sessions_table"]


@dataclass(slots=True)
class SessionsTable:
    """The sessions rows, by session id; conflicting duplicates are reported, not guessed."""

    infos: Mapping[str, SessionInfo]
    #: session id -> reason, for rows that cannot be used (conflicts, bad metadata).
    invalid: dict[str, tuple[str, RowRef]]


#: Sessions rows converted to Python values at a time while the table is checked.
_CHECK_ROWS = 8192
_OPTIONAL_INTS = ("index", "group_index", "rollout_id")
_TEXTS = ("label", "metadata")


class SessionInfos(Mapping[str, SessionInfo]):
    """The usable sessions rows by session id, kept as columns; a :class:`SessionInfo` is made when looked up.

    A log of many small sessions must not hold a Python object per sessions
    row for the whole run: this keeps the sorted session ids (one ``str``
    each), the numbers as numpy columns, and, for the text fields (label,
    metadata), the file and row to read them from in the sessions files'
    columns, which stay loaded, compressed (:class:`~.packed.PackedStrings`).
    Every row here was checked when the table was read; the metadata is
    parsed again when looked up.
    """

    def __init__(
        self,
        session_ids: list[str],
        numbers: dict[str, np.ndarray],
        file_numbers: np.ndarray,
        rows: np.ndarray,
        files: list[str],
        texts: list[dict[str, PackedStrings]],
    ) -> None:
        self._ids = session_ids
        #: ``reward`` (float64); ``index``, ``group_index``, ``rollout_id`` (int64) with their
        #: ``has_<name>`` masks (false for a null).
        self._numbers = numbers
        self._file_numbers = file_numbers
        self._rows = rows
        self._files = files
        #: Per sessions file: its ``label`` and ``metadata`` columns (those it has).
        self._texts = texts

    def _position(self, session_id: object) -> int | None:
        if not isinstance(session_id, str):
            return None
        k = bisect.bisect_left(self._ids, session_id)
        return k if k < len(self._ids) and self._ids[k] == session_id else None

    def __contains__(self, session_id: object) -> bool:
        return self._position(session_id) is not None

    def __getitem__(self, session_id: str) -> SessionInfo:
        k = self._position(session_id)
        if k is None:
            raise KeyError(session_id)
        numbers = self._numbers
        file_number, row = int(self._file_numbers[k]), int(self._rows[k])
        texts = self._texts[file_number]

        def text(name: str) -> str | None:
            column = texts.get(name)
            return None if column is None else column[row]

        metadata = text("metadata")
        return SessionInfo(
            reward=float(numbers["reward"][k]),
            index=int(numbers["index"][k]) if numbers["has_index"][k] else None,
            group_index=int(numbers["group_index"][k]) if numbers["has_group_index"][k] else None,
            label=text("label"),
            metadata=None if metadata is None else loads_json(metadata, "sessions metadata"),
            rollout_id=int(numbers["rollout_id"][k]) if numbers["has_rollout_id"][k] else None,
            source=RowRef(self._files[file_number], row),
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)


def read_sessions_table(session_files: Sequence[LogFile], known: Sequence[str]) -> SessionsTable:
    """The sessions table: each row checked, usable rows by session id, the others reported.

    Rows are checked in file order, a chunk at a time; a session id with
    several rows keeps the first usable one, and rows that disagree make
    the session invalid.  What is kept is columns (:class:`SessionInfos`).
    """
    tables = [_read(log_file) for log_file in session_files]
    names = [str(log_file.path) for log_file in session_files]
    # Every row's session id (a null or non-UTF-8 id fails the whole log, naming the row).
    # Each id is the index's string (``known``, sorted) when the index has it: the table and the
    # index share one string per session instead of holding two equal copies for the whole run.
    ids: list[str] = []
    for log_file, table in zip(session_files, tables, strict=True):
        column = table.column("session_id").combine_chunks()
        for start in range(0, len(column), _CHECK_ROWS):
            for row, sid in enumerate(strings(column.slice(start, _CHECK_ROWS)), start):
                if sid is None or isinstance(sid, NotUtf8):
                    what = "null" if sid is None else str(sid)
                    raise SchemaError(f"session_id is {what}", file=log_file.path, row=row)
                k = bisect.bisect_left(known, sid)
                ids.append(known[k] if k < len(known) and known[k] == sid else sid)
    count = len(ids)
    file_numbers = np.repeat(np.arange(len(tables), dtype=np.int32), [t.num_rows for t in tables])
    rows = np.concatenate([np.arange(t.num_rows, dtype=np.int64) for t in tables] or [np.zeros(0, np.int64)])
    # Rows by session id; a stable sort keeps each id's rows in file order.
    by_id = np.argsort(np.array(ids, dtype=object), kind="stable") if count else np.zeros(0, np.int64)
    sorted_ids = [ids[k] for k in by_id.tolist()]
    repeated = {a for a, b in itertools.pairwise(sorted_ids) if a == b}
    numbers: dict[str, np.ndarray] = {"reward": np.zeros(count)}
    for name in _OPTIONAL_INTS:
        numbers[name] = np.zeros(count, dtype=np.int64)
        numbers[f"has_{name}"] = np.zeros(count, dtype=bool)
    usable = np.zeros(count, dtype=bool)
    invalid: dict[str, tuple[str, RowRef]] = {}
    #: The first usable row of each session id that has several rows.
    first_of: dict[str, SessionInfo] = {}
    start = 0
    for log_file, table, name in zip(session_files, tables, names, strict=True):
        for lo in range(0, table.num_rows, _CHECK_ROWS):
            chunk = table.slice(lo, _CHECK_ROWS)
            cols = {column: _cells(chunk.column(column)) for column in log_file.columns if column != "session_id"}
            for i in range(chunk.num_rows):
                ref = RowRef(name, lo + i)
                sid = ids[start + lo + i]
                try:
                    info = _session_info(cols, i, ref)
                except ValueError as exc:
                    invalid.setdefault(sid, (str(exc), ref))
                    continue
                if sid in repeated:
                    previous = first_of.setdefault(sid, info)
                    if _info_values(previous) != _info_values(info):
                        assert previous.source is not None
                        reason = f"conflicting sessions rows (the other is {previous.source})"
                        invalid.setdefault(sid, (reason, ref))
                        continue
                at = start + lo + i
                usable[at] = True
                numbers["reward"][at] = info.reward
                for number in _OPTIONAL_INTS:
                    value = getattr(info, number)
                    if value is not None:
                        numbers[number][at] = value
                        numbers[f"has_{number}"][at] = True
        start += table.num_rows
    del first_of
    # Per session id, its first usable row (in file order), unless the session is invalid.
    kept_ids: list[str] = []
    kept_rows: list[int] = []
    for sid, k in zip(sorted_ids, by_id.tolist(), strict=True):
        if usable[k] and sid not in invalid and (not kept_ids or kept_ids[-1] != sid):
            kept_ids.append(sid)
            kept_rows.append(k)
    del ids, sorted_ids
    positions = np.array(kept_rows, dtype=np.int64)
    infos = SessionInfos(
        kept_ids,
        {column: values[positions] for column, values in numbers.items()},
        file_numbers[positions],
        rows[positions],
        names,
        [{name: PackedStrings(t.column(name).combine_chunks()) for name in _TEXTS if name in t.column_names}
         for t in tables],
    )
    return SessionsTable(infos, invalid)


def _read(log_file: LogFile) -> pa.Table:
    try:
        return open_parquet_file(log_file.path).read(columns=list(log_file.columns), use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None


def _cells(column: pa.ChunkedArray) -> list[Any]:
    array = column.combine_chunks()
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return strings(array)
    values: list[Any] = array.to_pylist()
    return values


def _session_info(cols: dict[str, list[Any]], row: int, ref: RowRef) -> SessionInfo:
    def get(name: str) -> Any:
        column = cols.get(name)
        value = None if column is None else column[row]
        if isinstance(value, NotUtf8):
            raise ValueError(f"sessions {name} is {value}")
        return value

    reward = get("reward")
    reward = 0.0 if reward is None else float(reward)
    if not math.isfinite(reward):
        raise ValueError(f"reward is {reward}")
    for name in ("index", "group_index"):
        value = get(name)
        if value is not None and not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ValueError(f"sessions {name} {value} is beyond int64 (the samples' {name} column)")
    metadata = get("metadata")
    parsed_meta = None
    if metadata is not None:
        parsed_meta = loads_json(metadata, "sessions metadata")
        check_sessions_metadata(parsed_meta)
    return SessionInfo(
        reward=reward,
        index=get("index"),
        group_index=get("group_index"),
        label=get("label"),
        metadata=parsed_meta,
        rollout_id=get("rollout_id"),
        source=ref,
    )


def _info_values(info: SessionInfo) -> tuple[Any, ...]:
    return (info.reward, info.index, info.group_index, info.label, canonical_json(info.metadata), info.rollout_id)
