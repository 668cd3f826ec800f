"""The read path: a turn log's rows, session by session, with bounded memory.

Reading is two passes.  The first (``build_index``) reads only ``session_id``
and ``seq`` and records, per session, the row groups and rows that hold its
turns, in ``seq`` order.  The second (``read_batch``) reads the other columns
one row group at a time, only for the row groups a batch of sessions needs,
and hands out each row's ids as numpy views into the decoded column: nothing
is sorted, taken, cast or converted to Python lists.  A row group too big to
decode whole (a foreign writer's, over twice :data:`SLICE_BYTES`) is indexed as
slices of rows, and read slice by slice (docs/performance.md).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._arrow import NUMPY_TYPES, NotUtf8, all_finite, numpy_view, strings, true_cells, validity
from ..errors import SchemaError, UnreadableLogError
from ..schema import REFERENCE_COLUMNS
from ..turns import RowRef
from .files import READ_COLUMNS, LogFile

__all__ = [
    "FileIndex",
    "LogIndex",
    "RawTurn",
    "ReadBatch",
    "RowGroup",
    "SessionPlace",
    "SessionPlaces",
    "SessionRows",
    "assemble_index",
    "build_index",
    "index_file",
    "index_parquet",
    "read_batch",
    "rows_from_table",
]

_LIST_COLUMNS = ("prompt_ids", "output_ids", "output_logprobs")
_ID_COLUMNS = ("prompt_ids", "output_ids")
INT32_MAX = 2**31 - 1
_TIMESTAMP = pa.timestamp("us", tz="UTC")
INT64_MAX = 2**63 - 1

#: Row groups decoding to more than twice this are indexed and read as slices of rows of
#: about this size each: a reader's working set is then the slices its sessions in flight
#: use, not whole row groups.  (Files tito writes keep row groups smaller,
#: capture/row_groups.py ROW_GROUP_BYTES, and are read whole.)  Tests lower it to force tiny slices.
SLICE_BYTES = 32 << 20

#: Read buffer of a sliced row group's stream: its column chunks are read a page at a
#: time through it instead of whole (pyarrow's default for an unbuffered read).
SLICE_READ_BUFFER = 1 << 20
_TEXT_COLUMNS = ("finish_reason", "prompt_messages", "response_message", "tools", "metadata")

#: A text cell: its UTF-8 bytes as a numpy view into the decoded column (as the
#: reader hands it out: validation decodes it, and rejects the session if it is
#: not UTF-8), or a str (rows built by hand).
Text = np.ndarray | str


@dataclass(slots=True)
class RawTurn:
    """One turns row before validation; ids are numpy views into the read columns."""

    seq: int | None
    prompt_ids: np.ndarray | None
    output_ids: np.ndarray | None
    output_logprobs: np.ndarray | None
    finish_reason: Text | None
    #: A prompt's JSON text is the whole conversation so far (hundreds of
    #: kilobytes): kept as bytes, the parser decodes only the part that is new.
    prompt_messages: Text | None
    response_message: Text | None
    tools: Text | None
    metadata: Text | None
    source: RowRef
    #: True when the row group's statistics show every prompt and output id in
    #: 0..INT32_MAX, so validation need not scan them again.
    ids_in_range: bool = False
    #: True when every logprob value the row's columns hold is finite (one check for
    #: the whole column), so validation need not check the row's own again.
    logprobs_finite: bool = False
    #: Format 2 (docs/spec.md §9): the earlier turn this row stores only the new part of
    #: its prompt against, and how many leading ids and messages it shares with it.  A
    #: format-1 row, or a format-2 row stored whole, has ``base_seq`` ``None``.
    base_seq: int | None = None
    shared_prompt_ids: int | None = None
    shared_messages: int | None = None
    #: When the turn completed; read only when asked for (``tito compact`` keeps it).
    timestamp: datetime | None = None
    #: The optional ``ill_formed`` column (SPEC §8.6); null or absent is false.
    ill_formed: bool = False
    #: (column, position) of the first null element inside a non-null list cell
    #: (``prompt_ids``, ``output_ids``, ``output_logprobs``): validation rejects the row.
    null_element: tuple[str, int] | None = None


@dataclass(slots=True)
class SessionRows:
    session_id: str
    rows: list[RawTurn] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RowGroup:
    """One row group of a turns file, or one slice of the rows of a row group too big to read whole."""

    file: int  # position in the turn-file list
    index: int  # row group number inside the file
    first_row: int  # file row number of its first row (for error messages)
    num_rows: int
    #: Uncompressed size of the columns read, per row (a planning estimate).
    bytes_per_row: float
    #: The statistics put every prompt and output id in 0..INT32_MAX (see _row_group_facts).
    ids_in_range: bool = False
    #: A slice: its first row inside the row group, and the rows every slice of that row
    #: group has (the last may have fewer).  ``slice_rows`` 0: the whole row group.  The
    #: slices of a row group are consecutive in ``LogIndex.row_groups``, in row order.
    offset: int = 0
    slice_rows: int = 0

    @property
    def read_bytes(self) -> float:
        """Decoded bytes a reader goes through to get these rows.

        pyarrow cannot start decoding a row group at a row offset (it has no
        row ranges), so a slice costs its row group's rows up to its end.
        """
        return (self.offset + self.num_rows) * self.bytes_per_row


@dataclass(slots=True)
class SessionPlace:
    """Where one session's rows are, in ``seq`` order (ties: file, then row).

    A view handed out by :class:`LogIndex`, made when asked for: the index
    itself keeps no object per session (see :class:`LogIndex`).
    """

    session_id: str
    #: Per row: the global row-group number (into ``LogIndex.row_groups``) and the row inside it.
    groups: np.ndarray
    rows: np.ndarray
    #: Estimated decoded size of the session's rows.
    nbytes: int

    @property
    def last_group(self) -> int:
        return int(self.groups.max())


class LogIndex:
    """Where every session's rows are: flat arrays over all rows, sessions in session-id order.

    A log of many small sessions must not cost a Python object (and two
    numpy arrays) per session for the whole run: the index holds the sorted
    session ids (one ``str`` each) and, per session, an offset and a size;
    its rows are two flat arrays, a session's rows contiguous and in ``seq``
    order.  :class:`SessionPlace` values are made on demand, as views into
    those arrays.  Sessions are named by their position in ``session_ids``.
    """

    __slots__ = ("_ids", "_session_bytes", "_starts", "groups", "row_groups", "rows")

    def __init__(self, row_groups: list[RowGroup], places: Mapping[str, SessionPlace] | None = None) -> None:
        """An index of ``places`` (any order); :func:`assemble_index` builds the arrays directly."""
        chosen = sorted((places or {}).values(), key=lambda p: p.session_id)
        self.row_groups = row_groups
        self._ids: list[str] = [p.session_id for p in chosen]
        lengths = np.array([len(p.groups) for p in chosen], dtype=np.int64)
        self._starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        #: Per row, in session order: its global row-group number and its row inside that group.
        self.groups = np.concatenate([p.groups for p in chosen]).astype(np.int32) if chosen else _NO_GROUPS
        self.rows = np.concatenate([p.rows for p in chosen]).astype(np.int64) if chosen else _NO_ROWS
        self._session_bytes = np.array([p.nbytes for p in chosen], dtype=np.int64)

    @classmethod
    def from_arrays(
        cls,
        row_groups: list[RowGroup],
        session_ids: Sequence[str],
        starts: np.ndarray,
        groups: np.ndarray,
        rows: np.ndarray,
        session_bytes: np.ndarray,
    ) -> LogIndex:
        """An index of sessions ``session_ids`` (sorted, unique) whose rows are ``[starts[k], starts[k + 1])``."""
        index = cls(row_groups)
        index._ids = session_ids if isinstance(session_ids, list) else list(session_ids)
        index._starts = starts.astype(np.int64, copy=False)
        index.groups = groups.astype(np.int32, copy=False)
        index.rows = rows.astype(np.int64, copy=False)
        index._session_bytes = session_bytes.astype(np.int64, copy=False)
        return index

    def __len__(self) -> int:
        return len(self._ids)

    def __reduce__(self) -> tuple[Any, ...]:
        # (slots, no __dict__: pickled through the flat arrays, for worker tasks)
        return (
            LogIndex.from_arrays,
            (self.row_groups, self._ids, self._starts, self.groups, self.rows, self._session_bytes),
        )

    @property
    def session_ids(self) -> Sequence[str]:
        """Every session id, in code-point order (the index's own list, not a copy: never change it)."""
        return self._ids

    @property
    def nbytes(self) -> int:
        return int(self._session_bytes.sum())

    @property
    def places(self) -> Mapping[str, SessionPlace]:
        """The sessions' places by id (made when looked up), in session-id order."""
        return _PlacesById(self)

    def position(self, session_id: str) -> int | None:
        """The position of ``session_id`` in :attr:`session_ids`, or ``None``."""
        k = bisect.bisect_left(self._ids, session_id)
        return k if k < len(self._ids) and self._ids[k] == session_id else None

    def place(self, position: int) -> SessionPlace:
        lo, hi = int(self._starts[position]), int(self._starts[position + 1])
        return SessionPlace(
            self._ids[position], self.groups[lo:hi], self.rows[lo:hi], int(self._session_bytes[position])
        )

    def subset(self, positions: np.ndarray) -> LogIndex:
        """The index of the sessions at ``positions`` (increasing), with the same row groups."""
        lengths = np.diff(self._starts)[positions]
        rows = _concatenate_ranges(self._starts[positions], lengths)
        return LogIndex.from_arrays(
            self.row_groups,
            [self._ids[int(k)] for k in positions],
            np.concatenate(([0], np.cumsum(lengths))),
            self.groups[rows],
            self.rows[rows],
            self._session_bytes[positions],
        )

    def only(self, session_ids: Iterable[str]) -> LogIndex:
        """The index of those of ``session_ids`` the log has."""
        found = {k for k in map(self.position, session_ids) if k is not None}
        return self.subset(np.array(sorted(found), dtype=np.int64))

    def in_id_order(self) -> Sequence[SessionPlace]:
        return SessionPlaces(self, np.arange(len(self._ids), dtype=np.int64))

    def in_log_order(self) -> Sequence[SessionPlace]:
        """Sessions in the order their last row appears in the log (ties by id).

        A log is written in time order, so this is the order sessions finish:
        consecutive sessions share row groups, and a batch of them reads few
        row groups that another batch also reads.
        """
        return SessionPlaces(self, self._log_order())

    def _log_order(self) -> np.ndarray:
        # Positions are in id order, so a stable sort by last row group breaks ties by id.
        return np.argsort(self._group_extremes()[1], kind="stable")

    def _group_extremes(self) -> tuple[np.ndarray, np.ndarray]:
        """Each session's lowest and highest row-group number (every session has a row)."""
        if not self._ids:
            return _NO_ROWS, _NO_ROWS
        starts = self._starts[:-1]
        return np.minimum.reduceat(self.groups, starts), np.maximum.reduceat(self.groups, starts)

    def batches(self, target_bytes: float, *, finish_together: int = 0, force_at: float = 4) -> list[ReadBatch]:
        """Cut the sessions, in log order, into batches of about ``target_bytes`` decoded bytes.

        A cut between two batches that both need a row group makes both decode
        it, so a batch that has reached its size is closed at the next *clean*
        cut (no later session reads a row group an earlier one read), unless
        none comes before it has grown to ``force_at`` (four) times its size.
        (At twice, small logs cut almost only between sessions sharing row
        groups: the 20-session benchmark decoded 42 row groups for 28.)

        With ``finish_together=N`` (workers), batches shrink toward the end of
        the log: one takes at most what is left over ``2 * N``, so the last
        batches are short and the workers finish close together instead of
        one running a whole batch alone.
        """
        order = self._log_order()
        if not len(order):
            return []
        lowest, highest = (extreme[order] for extreme in self._group_extremes())
        sizes = self._session_bytes[order]
        left = int(sizes.sum())
        # Clean cut after position k: every row group used so far lies before every
        # row group used from k + 1 on.
        highest_so_far = np.maximum.accumulate(highest)
        lowest_after = np.minimum.accumulate(lowest[::-1])[::-1]
        clean = np.append(highest_so_far[:-1] < lowest_after[1:], True).tolist()
        batches: list[ReadBatch] = []
        first = 0
        size = 0
        target = min(target_bytes, left / (2 * finish_together)) if finish_together else target_bytes
        for k, place_bytes in enumerate(sizes.tolist()):
            size += place_bytes
            if size >= force_at * target or (size >= target and clean[k]):
                batches.append(ReadBatch(self.row_groups, SessionPlaces(self, order[first : k + 1])))
                left -= size
                first, size = k + 1, 0
                if finish_together:
                    target = min(target_bytes, left / (2 * finish_together))
        if first < len(order):
            batches.append(ReadBatch(self.row_groups, SessionPlaces(self, order[first:])))
        return batches


_NO_GROUPS = np.zeros(0, dtype=np.int32)
_NO_ROWS = np.zeros(0, dtype=np.int64)


def _concatenate_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])``, without a Python loop."""
    total = int(lengths.sum())
    if total == 0:
        return _NO_ROWS
    # Each range's start, shifted by the rows of the ranges before it.
    offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    rows: np.ndarray = np.arange(total, dtype=np.int64) + offsets
    return rows


class SessionPlaces(Sequence[SessionPlace]):
    """Some of an index's sessions, in a given order, as :class:`SessionPlace` values made on access.

    What a :class:`ReadBatch` holds: its sessions' positions in the index,
    not an object per session.  Pickled (a worker's task), it carries only
    its own sessions' part of the index.
    """

    __slots__ = ("log_index", "positions")

    def __init__(self, log_index: LogIndex, positions: np.ndarray) -> None:
        self.log_index = log_index
        self.positions = positions

    def __len__(self) -> int:
        return len(self.positions)

    @overload
    def __getitem__(self, item: int) -> SessionPlace: ...

    @overload
    def __getitem__(self, item: slice) -> Sequence[SessionPlace]: ...

    def __getitem__(self, item: int | slice) -> SessionPlace | Sequence[SessionPlace]:
        if isinstance(item, slice):
            return SessionPlaces(self.log_index, self.positions[item])
        return self.log_index.place(int(self.positions[item]))

    def __iter__(self) -> Iterator[SessionPlace]:
        place = self.log_index.place
        for position in self.positions.tolist():
            yield place(position)

    @property
    def nbytes(self) -> int:
        return int(self.log_index._session_bytes[self.positions].sum())

    def __reduce__(self) -> tuple[Any, ...]:
        # Only this batch's sessions travel, in the index's order; their own order is kept.
        ascending = np.sort(self.positions)
        order = np.searchsorted(ascending, self.positions)
        return (SessionPlaces, (self.log_index.subset(ascending), order))


class _PlacesById(Mapping[str, SessionPlace]):
    """:attr:`LogIndex.places`: a read-only mapping over the index, values made when looked up."""

    __slots__ = ("index",)

    def __init__(self, index: LogIndex) -> None:
        self.index = index

    def __getitem__(self, session_id: str) -> SessionPlace:
        position = self.index.position(session_id)
        if position is None:
            raise KeyError(session_id)
        return self.index.place(position)

    def __contains__(self, session_id: object) -> bool:
        return isinstance(session_id, str) and self.index.position(session_id) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.index.session_ids)

    def __len__(self) -> int:
        return len(self.index)


@dataclass(slots=True)
class ReadBatch:
    """Sessions to read together, in the order they are to be handed out."""

    row_groups: list[RowGroup]
    sessions: Sequence[SessionPlace]

    @property
    def nbytes(self) -> int:
        if isinstance(self.sessions, SessionPlaces):
            return self.sessions.nbytes
        return sum(s.nbytes for s in self.sessions)


#: ``map(function, *iterables)`` in file order: the builtin, or a process pool's ``map``.
FileMap = Callable[..., Iterable[Any]]


def build_index(
    files: Sequence[LogFile], only: set[str] | None = None, *, map_files: FileMap | None = None
) -> LogIndex:
    """First pass over the turns files: where each session's rows are.

    Each file is read on its own (:func:`index_file`), by ``map_files`` when
    given (a worker pool's ``map``: on a log of thousands of files this pass
    is seconds of one core before any session can be rebuilt), then the
    parts are put together in file order (:func:`assemble_index`), so the
    index is the same either way.
    """
    only_ids = None if only is None else frozenset(only)
    if map_files is None:
        parts = [index_file(log_file, only_ids) for log_file in files]
    else:
        parts = list(map_files(index_file, files, [only_ids] * len(files)))
    return assemble_index(parts)


def assemble_index(parts: Sequence[FileIndex]) -> LogIndex:
    """The log's index from its turns files' parts, given in turn-file order."""
    row_groups: list[RowGroup] = []
    codes: dict[str, int] = {}
    columns: list[tuple[np.ndarray, ...]] = []
    for number, part in enumerate(parts):
        to_global = np.array([codes.setdefault(sid, len(codes)) for sid in part.session_ids] or [0], dtype=np.int64)
        columns.append(
            (
                to_global[part.local],
                part.seq_null,
                part.seq_values,
                part.file_rows,
                part.groups + len(row_groups),
                part.rows,
            )
        )
        row_groups.extend(RowGroup(number, *facts) for facts in part.row_groups)
    if not columns:
        return LogIndex(row_groups)
    code, seq_null, seq_values, file_row, group, row = (np.concatenate(c) for c in zip(*columns, strict=True))
    del columns
    # Session codes (first-seen order) -> positions in code-point order of id, for the
    # sessions that kept a row (``only`` drops the others' rows, not their codes).
    names = list(codes)
    del codes
    kept = np.zeros(len(names), dtype=bool)
    kept[code] = True
    kept_codes = np.flatnonzero(kept)
    # (An object array sorts the strings in code-point order, as sorted() does, without an int per id.)
    by_id = kept_codes[np.argsort(np.array(names, dtype=object)[kept_codes], kind="stable")]
    position_of_code = np.zeros(len(names), dtype=np.int64)
    position_of_code[by_id] = np.arange(len(by_id), dtype=np.int64)
    session_ids = [names[c] for c in by_id.tolist()]
    del names, by_id, kept_codes
    position = position_of_code[code]
    file_no = np.repeat(np.arange(len(parts)), [len(part.local) for part in parts])
    # Rows in seq order (a null seq sorts last, where validation reports it), ties by file and row.
    order = np.lexsort((file_row, file_no, seq_values, seq_null, position))
    position, group, row = position[order], group[order], row[order]
    bytes_per_row = np.array([g.bytes_per_row for g in row_groups] or [0.0])
    counts = np.bincount(position, minlength=len(session_ids))
    starts = np.concatenate(([0], np.cumsum(counts)))
    # Per session, the sum of its rows' estimates, truncated as int(sum) was.
    sums = np.add.reduceat(bytes_per_row[group], starts[:-1]) if len(session_ids) else np.zeros(0)
    return LogIndex.from_arrays(row_groups, session_ids, starts, group, row, sums.astype(np.int64))


@dataclass(slots=True)
class FileIndex:
    """One turns file's part of the index; arrays hold one entry per row kept."""

    #: Per row group, or slice of one: (row group, first row, rows, bytes per row, ids in
    #: range, offset, slice rows), the fields of its :class:`RowGroup` but the file's
    #: number, which only the whole log knows.
    row_groups: list[tuple[int, int, int, float, bool, int, int]]
    #: The file's distinct session ids, in first-seen order; ``local`` indexes it.
    session_ids: list[str]
    local: np.ndarray
    seq_null: np.ndarray
    seq_values: np.ndarray
    file_rows: np.ndarray
    #: Row group, or slice (in this file's ``row_groups``), and row inside it.
    groups: np.ndarray
    rows: np.ndarray


def index_file(log_file: LogFile, only: frozenset[str] | None) -> FileIndex:
    """The index part of one turns file (in a worker process when a pool builds the index)."""
    try:
        parquet = pq.ParquetFile(log_file.path, pre_buffer=False)  # (see logfiles.open_parquet)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
    with parquet:
        return index_parquet(log_file, parquet, only)


def index_parquet(log_file: LogFile, parquet: pq.ParquetFile, only: frozenset[str] | None) -> FileIndex:
    """:func:`index_file` for a file already open (``TurnLog.open`` classifies and indexes in one open)."""
    try:
        table = parquet.read(columns=["session_id", "seq"], use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
    sids = table.column("session_id").combine_chunks()
    n = len(sids)
    # Row groups (or slices) of this file, and each row's group and row inside it.
    row_groups: list[tuple[int, int, int, float, bool, int, int]] = []
    group_of_row = np.empty(n, dtype=np.int32)
    row_in_group = np.empty(n, dtype=np.int64)
    first = 0
    for g in range(parquet.metadata.num_row_groups):
        meta = parquet.metadata.row_group(g)
        size, ids_in_range = _row_group_facts(meta)
        rows = meta.num_rows
        per_row = size / max(rows, 1)
        step = _slice_rows(size, rows)
        here = np.arange(rows)
        group_of_row[first : first + rows] = len(row_groups) + here // step
        row_in_group[first : first + rows] = here % step
        if step >= rows:
            row_groups.append((g, first, rows, per_row, ids_in_range, 0, 0))
        else:
            row_groups.extend(
                (g, first + offset, min(step, rows - offset), per_row, ids_in_range, offset, step)
                for offset in range(0, rows, step)
            )
        first += rows
    keep = np.ones(n, dtype=bool)
    if sids.null_count:
        valid = validity(sids)
        if only is None:
            raise SchemaError("session_id is null", file=log_file.path, row=int(np.argmin(valid)))
        keep &= valid
    # Session ids -> small integers in first-seen order (a null id maps to 0; `keep`
    # drops it).  A dict over the column's values: this pass reads one short
    # string per turn, and importing pyarrow.compute would slow every command's
    # start-up (docs/performance.md).
    local_of: dict[str, int] = {}
    local = np.fromiter(
        (0 if sid is None else local_of.setdefault(sid, len(local_of)) for sid in _session_ids(sids, log_file)),
        dtype=np.int64,
        count=n,
    )
    unique_ids = list(local_of)
    if only is not None:
        wanted = np.array([sid in only for sid in unique_ids] or [False])
        keep &= wanted[local]
    seq_values, seq_valid = _int64_values(table.column("seq").combine_chunks())
    return FileIndex(
        row_groups,
        unique_ids,
        *(a[keep] for a in (local, ~seq_valid, seq_values, np.arange(n, dtype=np.int64), group_of_row, row_in_group)),
    )


def _slice_rows(size: int, rows: int) -> int:
    """Rows per slice of a row group of ``rows`` rows and ``size`` decoded bytes (``rows``: read it whole)."""
    if size <= 2 * SLICE_BYTES or rows <= 1:
        return max(rows, 1)
    pieces = -(-size // SLICE_BYTES)
    return -(-rows // pieces)


#: Session ids converted to Python strings at a time by the index pass (a bound on its transient
#: objects: the whole column at once was a string per turn, most of them duplicates, alive together).
_ID_CHUNK_ROWS = 16384


def _session_ids(sids: pa.Array, log_file: LogFile) -> Iterator[str | None]:
    for start in range(0, len(sids), _ID_CHUNK_ROWS):
        cells = strings(sids.slice(start, _ID_CHUNK_ROWS))
        for offset, sid in enumerate(cells):
            if isinstance(sid, NotUtf8):
                raise SchemaError(f"session_id is {sid}", file=log_file.path, row=start + offset)
        yield from cells  # type: ignore[misc]  # no NotUtf8 left


def read_batch(
    files: Sequence[LogFile], batch: ReadBatch, *, timestamps: bool = False
) -> Iterator[SessionRows]:
    """Each session of ``batch`` as raw rows, in batch order; row groups are read lazily, once.

    A row group's decoded columns stay alive until the last session of the
    batch that needs it has been handed out (the consumer is done with a
    session when it asks for the next one).  A row group read in slices is
    decoded in order, from its first slice: a slice decoded on the way to a
    later one is kept if a session of the batch still needs it, else dropped
    at once.  ``timestamps``: read the ``timestamp`` column too (a rebuild
    does not need it).
    """
    last_user: dict[int, int] = {}
    for position, place in enumerate(batch.sessions):
        # (A set, not np.unique: that imports numpy.ma on first use, a start-up cost.)
        for g in set(place.groups.tolist()):
            last_user[g] = position
    loaded: dict[int, _Columns] = {}
    streams = _SliceStreams(files, batch.row_groups, last_user, timestamps)
    try:
        for position, place in enumerate(batch.sessions):
            session = SessionRows(place.session_id)
            for g, r in zip(place.groups.tolist(), place.rows.tolist(), strict=False):
                columns = loaded.get(g)
                if columns is None:
                    if batch.row_groups[g].slice_rows:
                        for h, part in streams.through(g):
                            if last_user.get(h, -1) >= position:
                                loaded[h] = part
                        columns = loaded[g]
                    else:
                        columns = loaded[g] = _load_group(files, batch.row_groups[g], timestamps)
                session.rows.append(columns.row(r))
            yield session
            for g in [g for g in loaded if last_user[g] == position]:
                del loaded[g]
    finally:
        streams.close()


class _SliceStreams:
    """The slices of a batch's big row groups, decoded in order, one open stream per row group.

    pyarrow cannot start decoding a row group at a row offset, so slice k of
    a row group comes after its slices 0..k-1: its stream stays open, at the
    next slice, while the batch needs a later slice of that row group.
    """

    def __init__(
        self, files: Sequence[LogFile], row_groups: Sequence[RowGroup], needed: Iterable[int], timestamps: bool
    ) -> None:
        self._files = files
        self._row_groups = row_groups
        self._timestamps = timestamps
        #: Per sliced row group (file, row group): the last of its slices the batch needs.
        self._last_needed: dict[tuple[int, int], int] = {}
        for g in needed:
            group = row_groups[g]
            if group.slice_rows:
                key = (group.file, group.index)
                self._last_needed[key] = max(g, self._last_needed.get(key, g))
        self._open: dict[tuple[int, int], _SliceStream] = {}

    def through(self, g: int) -> list[tuple[int, _Columns]]:
        """Slice ``g`` and the slices of its row group decoded on the way to it, as (slice, columns)."""
        group = self._row_groups[g]
        key = (group.file, group.index)
        stream = self._open.get(key)
        if stream is None or stream.next_slice > g:
            # (Passed: only when a slice is asked for again after it was dropped.)
            if stream is not None:
                stream.close()
            first_slice = g - group.offset // group.slice_rows  # (its slices are consecutive in the index)
            stream = self._open[key] = _SliceStream(self._files[group.file], group, first_slice, self._timestamps)
        decoded = []
        try:
            while stream.next_slice <= g:
                h = stream.next_slice
                decoded.append((h, stream.read(self._row_groups[h])))
        except BaseException:
            stream.close()
            del self._open[key]
            raise
        if g >= self._last_needed.get(key, g):
            stream.close()
            del self._open[key]
        return decoded

    def close(self) -> None:
        for stream in self._open.values():
            stream.close()
        self._open.clear()


class _SliceStream:
    """One row group's rows, slice after slice (``ParquetFile.iter_batches``, page by page)."""

    def __init__(self, log_file: LogFile, group: RowGroup, first_slice: int, timestamps: bool) -> None:
        self._log_file = log_file
        self.next_slice = first_slice
        columns = _columns_to_read(log_file, timestamps)
        try:
            # Unbuffered reads would fetch each column chunk whole; pre-buffering, the whole row group.
            self._parquet = pq.ParquetFile(log_file.path, pre_buffer=False, buffer_size=SLICE_READ_BUFFER)
            self._batches = self._parquet.iter_batches(
                batch_size=group.slice_rows, row_groups=[group.index], columns=columns, use_threads=False
            )
        except (OSError, pa.ArrowException) as exc:
            raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
        #: Rows decoded but not yet handed out (a batch of pyarrow's may end inside a slice).
        self._pending: pa.RecordBatch | None = None

    def read(self, group: RowGroup) -> _Columns:
        """The next slice, which is ``group``."""
        parts: list[pa.RecordBatch] = []
        rows = 0
        try:
            while rows < group.num_rows:
                batch = self._pending if self._pending is not None else next(self._batches, None)
                self._pending = None
                if batch is None:
                    raise UnreadableLogError(
                        f"row group {group.index} ended before its row {group.offset + rows}", file=self._log_file.path
                    )
                take = min(batch.num_rows, group.num_rows - rows)
                if take < batch.num_rows:
                    self._pending = batch.slice(take)
                parts.append(batch.slice(0, take) if take < batch.num_rows else batch)
                rows += take
        except (OSError, pa.ArrowException) as exc:
            raise UnreadableLogError(f"cannot read ({exc})", file=self._log_file.path) from None
        self.next_slice += 1
        table = pa.Table.from_batches(parts)  # (a slice has rows: ``parts`` is not empty)
        return _Columns(table, str(self._log_file.path), group.first_row, ids_in_range=group.ids_in_range)

    def close(self) -> None:
        self._pending = None
        self._parquet.close()


def _int64_values(array: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """An integer column as (int64 values, validity); values at null slots are 0.

    A ``uint64`` value beyond int64 counts as null here (it sorts last, as a
    null seq does); :func:`_beyond_int64` gives those rows their true values
    for validation to report.
    """
    valid = validity(array)
    if pa.types.is_null(array.type):
        return np.zeros(len(array), dtype=np.int64), valid
    big = _beyond_int64(array)
    if big:
        array = pa.array(
            [None if row in big else v for row, v in enumerate(array.to_pylist())], type=pa.int64()
        )
        valid = validity(array)
    # (cast goes through pyarrow.compute, a slow import: skip it when there is nothing to do)
    cast = array if pa.types.is_int64(array.type) else array.cast(pa.int64())
    # Straight from the data buffer: exact for any int64, and no float detour for nulls.
    values = np.frombuffer(cast.buffers()[1], dtype=np.int64, count=cast.offset + len(cast))[cast.offset :]
    if array.null_count:
        values = np.where(valid, values, 0)
    return values, valid


def _beyond_int64(array: pa.Array) -> dict[int, int]:
    """Row -> value of the cells of a ``uint64`` column above 2**63 - 1 (none for other types)."""
    if not pa.types.is_uint64(array.type) or len(array) == 0:
        return {}
    values = np.frombuffer(array.buffers()[1], dtype=np.uint64, count=array.offset + len(array))[array.offset :]
    rows = np.flatnonzero((values > INT64_MAX) & validity(array))
    return {int(r): int(values[r]) for r in rows}


def _columns_to_read(log_file: LogFile, timestamps: bool) -> list[str]:
    """The columns a rebuild reads that ``log_file`` has (and ``timestamp``, when asked for)."""
    wanted = (*READ_COLUMNS, "timestamp") if timestamps else READ_COLUMNS
    return [name for name in wanted if name in log_file.columns]


def _load_group(files: Sequence[LogFile], group: RowGroup, timestamps: bool = False) -> _Columns:
    log_file = files[group.file]
    columns = _columns_to_read(log_file, timestamps)
    try:
        # Opened per row group, not kept: an open ParquetFile holds on to buffers it has read.
        with pq.ParquetFile(log_file.path) as parquet:
            # One worker, one core: pyarrow's own threads would compete with the other workers.
            table = parquet.read_row_group(group.index, columns=columns, use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
    return _Columns(table, str(log_file.path), group.first_row, ids_in_range=group.ids_in_range)


def _row_group_facts(meta: pq.RowGroupMetaData) -> tuple[int, bool]:
    """The decoded size of the columns read, and whether the statistics bound every id.

    The second is true when the min/max statistics of ``prompt_ids`` and
    ``output_ids`` put every id in 0..INT32_MAX.  Writers compute them from
    the values as they write (the capture writer, pyarrow, Spark do), so
    validation can skip one scan of every prompt's ids, a pass over the
    largest column of the log.  Without statistics, each row is checked.
    """
    size = 0
    unseen = set(_ID_COLUMNS)
    bounded = True
    for c in range(meta.num_columns):
        column = meta.column(c)
        name = column.path_in_schema.split(".")[0]
        if name not in READ_COLUMNS:
            continue
        size += column.total_uncompressed_size
        if name in unseen:
            unseen.discard(name)
            stats = column.statistics
            if stats is not None and not stats.has_min_max and stats.num_values == 0:
                continue  # no ids at all (format 2: every prompt of the row group shared whole)
            if stats is None or not stats.has_min_max or stats.min < 0 or stats.max > INT32_MAX:
                bounded = False
    return size, bounded and not unseen


class _Columns:
    """One decoded row group, handing out rows as :class:`RawTurn` with numpy views for the ids."""

    def __init__(
        self,
        table: pa.Table,
        file_name: str,
        first_row: int,
        sources: Sequence[RowRef] | None = None,
        *,
        ids_in_range: bool = False,
    ) -> None:
        self.file_name = file_name
        self.ids_in_range = ids_in_range
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
        seq_values, seq_valid = _int64_values(seq)
        # As lists, like _Slices's offsets: read a row at a time.
        self.seq: list[int] = seq_values.tolist()
        self.seq_valid: list[bool] = seq_valid.tolist()
        #: Rows whose seq is beyond int64 (a uint64 column): their exact value, for validation to reject.
        self.seq_beyond = _beyond_int64(seq)
        self.lists = {name: _Slices(array(name), _list_values) for name in _LIST_COLUMNS}
        # Usually none: only these need a look for a null inside a row's list.
        self._lists_with_null_elements = [(n, c) for n, c in self.lists.items() if c.values_valid is not None]
        logprobs = self.lists["output_logprobs"].values
        # The column's whole values buffer (a slice's parent's too): a false negative only costs the rows' own checks.
        self.logprobs_finite = logprobs is not None and logprobs.dtype.kind == "f" and all_finite(logprobs)
        ill_formed = array("ill_formed")
        #: Rows marked ill-formed (true; null is false): few or none, so a set of row numbers.
        marked = np.flatnonzero(true_cells(ill_formed)).tolist() if ill_formed is not None else []
        self.ill_formed = frozenset(marked)
        self.texts = {name: _Slices(array(name), _utf8_bytes) for name in _TEXT_COLUMNS}
        # Format 2's reference columns (absent in format 1: every row is stored whole).
        self.references: dict[str, tuple[list[int], list[bool]]] = {}
        for name in REFERENCE_COLUMNS:
            column = array(name)
            if column is not None:
                values, valid = _int64_values(column)
                self.references[name] = (values.tolist(), valid.tolist())
        stamps = array("timestamp")
        self.timestamps: list[datetime | None] | None = None
        if stamps is not None:
            if pa.types.is_timestamp(stamps.type) and stamps.type != _TIMESTAMP:
                stamps = stamps.cast(_TIMESTAMP, safe=False)
            self.timestamps = stamps.to_pylist()

    def reference(self, name: str, r: int) -> int | None:
        column = self.references.get(name)
        if column is None or not column[1][r]:
            return None
        return column[0][r]

    def row(self, r: int) -> RawTurn:
        def text(name: str) -> Text | None:
            return self.texts[name].get(r)

        null_element = None
        for name, column in self._lists_with_null_elements:
            position = column.first_null_element(r)
            if position is not None:
                null_element = (name, position)
                break
        seq = self.seq[r] if self.seq_valid[r] else self.seq_beyond.get(r)
        return RawTurn(
            seq=seq,
            prompt_ids=self.lists["prompt_ids"].get(r),
            output_ids=self.lists["output_ids"].get(r),
            output_logprobs=self.lists["output_logprobs"].get(r),
            finish_reason=text("finish_reason"),
            prompt_messages=text("prompt_messages"),
            response_message=text("response_message"),
            tools=text("tools"),
            metadata=text("metadata"),
            source=RowRef(self.file_name, self.first_row + r) if self.sources is None else self.sources[r],
            ids_in_range=self.ids_in_range,
            logprobs_finite=self.logprobs_finite,
            base_seq=self.reference("base_seq", r),
            shared_prompt_ids=self.reference("shared_prompt_ids", r),
            shared_messages=self.reference("shared_messages", r),
            timestamp=None if self.timestamps is None else self.timestamps[r],
            ill_formed=r in self.ill_formed,
            null_element=null_element,
        )


def rows_from_table(session_id: str, table: pa.Table, sources: Sequence[RowRef]) -> SessionRows:
    """One session's rows from an Arrow table already in ``seq`` order (``sources[i]`` names row ``i``)."""
    columns = _Columns(table, "", 0, sources)
    return SessionRows(session_id, [columns.row(r) for r in range(table.num_rows)])


class _Slices:
    """Row access to a column of variable-length cells (lists, strings) as numpy views.

    A cell is a slice of the column's one values buffer between two offsets:
    for a list column its values, for a string column its UTF-8 bytes.
    """

    def __init__(self, array: pa.Array | None, values: Callable[[pa.Array], np.ndarray]) -> None:
        #: For a list column with null elements: the validity of its values (else ``None``).
        self.values_valid: np.ndarray | None = None
        # Python lists, not numpy arrays: every row reads a cell of each column, and a list's
        # item is a plain int (a numpy array's is a numpy scalar, made for each read).
        self.valid: list[bool] | None
        self.offsets: list[int] | None
        if array is None or pa.types.is_null(array.type):
            self.valid = self.offsets = self.values = None
            return
        self.valid = validity(array).tolist()
        large = pa.types.is_large_list(array.type) or pa.types.is_large_string(array.type)
        offsets = numpy_view(array.buffers()[1], np.int64 if large else np.int32, array.offset, len(array) + 1)
        self.offsets = offsets.tolist()
        self.values = values(array)
        if (pa.types.is_list(array.type) or pa.types.is_large_list(array.type)) and array.values.null_count:
            # (.values is the whole child, not sliced: the offsets index it as they are.)
            self.values_valid = validity(array.values)

    def first_null_element(self, i: int) -> int | None:
        """Position of the first null element inside list cell ``i`` (``None``: none, or a null cell)."""
        if self.values_valid is None or self.valid is None or not self.valid[i]:
            return None
        assert self.offsets is not None
        inside = self.values_valid[self.offsets[i] : self.offsets[i + 1]]
        if inside.all():
            return None
        return int(np.argmin(inside))

    def get(self, i: int) -> np.ndarray | None:
        if self.valid is None or not self.valid[i]:
            return None
        assert self.offsets is not None and self.values is not None
        view: np.ndarray = self.values[self.offsets[i] : self.offsets[i + 1]]
        return view


def _list_values(array: pa.Array) -> np.ndarray:
    values = array.values
    if values.null_count and values.type in NUMPY_TYPES:
        # Rare: nulls inside a list (the rows holding them are rejected, _Slices.first_null_element).
        # Filled with 0, not NaN, so that the other rows keep their exact integer type.
        values = values.fill_null(0)
    if values.type not in NUMPY_TYPES:
        converted: np.ndarray = values.to_numpy(zero_copy_only=False)
        return converted
    return numpy_view(values.buffers()[1], NUMPY_TYPES[values.type], values.offset, len(values))


def _utf8_bytes(array: pa.Array) -> np.ndarray:
    # string or large_string (logfiles checks the schema); offsets index the whole buffer
    data = array.buffers()[2]
    return numpy_view(data, np.uint8, 0, 0 if data is None else data.size)
