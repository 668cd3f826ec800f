"""The second read pass: a batch of sessions' rows, row groups decoded lazily, once each.

Reading is two passes.  The first (:mod:`.index_pass`) reads only
``session_id`` and ``seq`` and records, per session, the row groups and rows
that hold its turns, in ``seq`` order.  The second (:func:`read_batch`) reads
the other columns one row group at a time, only for the row groups a batch of
sessions needs, and hands out each row's ids as numpy views into the decoded
column (:mod:`.columns`).  A row group indexed as slices is read slice by
slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from .._parquet import open_parquet_file
from ..errors import UnreadableLogError
from ..turns import RowRef
from .columns import Columns, RawTurn
from .files import READ_COLUMNS, LogFile
from .index import ReadBatch, RowGroup

__all__ = ["SessionRows", "read_batch", "rows_from_table"]


#: Read buffer of a sliced row group's stream: its column chunks are read a page at a
#: time through it instead of whole (pyarrow's default for an unbuffered read).
SLICE_READ_BUFFER = 1 << 20


@dataclass(slots=True)
class SessionRows:
    session_id: str
    rows: list[RawTurn] = field(default_factory=list)



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
    loaded: dict[int, Columns] = {}
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

    def through(self, g: int) -> list[tuple[int, Columns]]:
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
            self._parquet = open_parquet_file(log_file.path, pre_buffer=False, buffer_size=SLICE_READ_BUFFER)
            self._batches = self._parquet.iter_batches(
                batch_size=group.slice_rows, row_groups=[group.index], columns=columns, use_threads=False
            )
        except (OSError, pa.ArrowException) as exc:
            raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
        #: Rows decoded but not yet handed out (a batch of pyarrow's may end inside a slice).
        self._pending: pa.RecordBatch | None = None

    def read(self, group: RowGroup) -> Columns:
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
        return Columns(table, str(self._log_file.path), group.first_row, ids_in_range=group.ids_in_range)

    def close(self) -> None:
        self._pending = None
        self._parquet.close()


def _columns_to_read(log_file: LogFile, timestamps: bool) -> list[str]:
    """The columns a rebuild reads that ``log_file`` has (and ``timestamp``, when asked for)."""
    wanted = (*READ_COLUMNS, "timestamp") if timestamps else READ_COLUMNS
    return [name for name in wanted if name in log_file.columns]


def _load_group(files: Sequence[LogFile], group: RowGroup, timestamps: bool = False) -> Columns:
    log_file = files[group.file]
    columns = _columns_to_read(log_file, timestamps)
    try:
        # Opened per row group, not kept: an open ParquetFile holds on to buffers it has read.
        with open_parquet_file(log_file.path) as parquet:
            # One worker, one core: pyarrow's own threads would compete with the other workers.
            table = parquet.read_row_group(group.index, columns=columns, use_threads=False)
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
    return Columns(table, str(log_file.path), group.first_row, ids_in_range=group.ids_in_range)



def rows_from_table(session_id: str, table: pa.Table, sources: Sequence[RowRef]) -> SessionRows:
    """One session's rows from an Arrow table already in ``seq`` order (``sources[i]`` names row ``i``)."""
    columns = Columns(table, "", 0, sources)
    return SessionRows(session_id, [columns.row(r) for r in range(table.num_rows)])


