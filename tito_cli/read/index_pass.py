"""The first read pass: each turns file's ``session_id`` and ``seq``, into the log's :class:`LogIndex`.

A row group too big to decode whole (a foreign writer's, over twice
:data:`SLICE_BYTES`) is indexed as slices of rows, and read slice by slice
(docs/performance.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._arrow import NotUtf8, strings, validity
from .._parquet import open_parquet_file
from ..errors import SchemaError, UnreadableLogError
from .columns import INT32_MAX, int64_values
from .files import READ_COLUMNS, LogFile
from .index import LogIndex, RowGroup, groups_of, log_row_dtype, row_group_starts

__all__ = ["FileIndex", "FileMap", "assemble_index", "build_index", "index_file", "index_parquet"]

_ID_COLUMNS = ("prompt_ids", "output_ids")
_NO_INTS = np.zeros(0, dtype=np.int32)


#: Row groups decoding to more than twice this are indexed and read as slices of rows of
#: about this size each: a reader's working set is then the slices its sessions in flight
#: use, not whole row groups.  (Files tito writes keep row groups smaller,
#: capture/row_groups.py ROW_GROUP_BYTES, and are read whole.)  Tests lower it to force tiny slices.
SLICE_BYTES = 32 << 20


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
    """The log's index from its turns files' parts, given in turn-file order.

    Each part's arrays are emptied once copied: opening a log of many sessions
    peaks here, with every row's session, ``seq`` and place alive at once.
    """
    row_groups: list[RowGroup] = [
        RowGroup(number, *facts) for number, part in enumerate(parts) for facts in part.row_groups
    ]
    total = sum(len(part.local) for part in parts)
    if not total:
        return LogIndex(row_groups)
    codes: dict[str, int] = {}
    code = np.empty(total, dtype=np.int64)
    seq_null = np.empty(total, dtype=bool)
    seq_values = np.empty(total, dtype=np.int64)
    # A log row numbers every row group's rows in turn (LogIndex): the file's rows before it, plus the file row.
    group_starts = row_group_starts(row_groups)
    log_row = np.empty(total, dtype=log_row_dtype(group_starts[-1]))
    at = file_start = 0
    for part in parts:
        to_global = np.array([codes.setdefault(sid, len(codes)) for sid in part.session_ids] or [0], dtype=np.int64)
        end = at + len(part.local)
        code[at:end] = to_global[part.local]
        seq_null[at:end] = part.seq_null
        seq_values[at:end] = part.seq_values
        log_row[at:end] = part.file_rows + file_start
        file_start += part.num_rows
        part.release()
        at = end
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
    del code, position_of_code
    # Rows in seq order (a null seq sorts last, where validation reports it), ties by file and
    # row: the rows are in log-row order here and lexsort is stable.
    order = np.lexsort((seq_values, seq_null, position))
    del seq_values, seq_null
    counts = np.bincount(position, minlength=len(session_ids))
    del position
    log_row = log_row[order]
    del order
    starts = np.concatenate(([0], np.cumsum(counts)))
    # Per session, the sum of its rows' estimates, truncated as int(sum) was.
    bytes_per_row = np.array([g.bytes_per_row for g in row_groups] or [0.0])
    sums = np.add.reduceat(bytes_per_row[groups_of(group_starts, log_row)], starts[:-1])
    return LogIndex.from_arrays(row_groups, session_ids, starts, log_row, sums.astype(np.int64))


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
    #: Row numbers in the file.
    file_rows: np.ndarray

    @property
    def num_rows(self) -> int:
        """The file's rows, kept or not."""
        return sum(facts[2] for facts in self.row_groups)

    def release(self) -> None:
        """Drop the per-row arrays (:func:`assemble_index` has copied them)."""
        self.local = self.seq_null = self.seq_values = self.file_rows = _NO_INTS


def index_file(log_file: LogFile, only: frozenset[str] | None) -> FileIndex:
    """The index part of one turns file (in a worker process when a pool builds the index)."""
    try:
        parquet = open_parquet_file(log_file.path, pre_buffer=False)  # (see logfiles.open_parquet)
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
    # Row groups (or slices) of this file, in row order.
    row_groups: list[tuple[int, int, int, float, bool, int, int]] = []
    first = 0
    for g in range(parquet.metadata.num_row_groups):
        meta = parquet.metadata.row_group(g)
        size, ids_in_range = _row_group_facts(meta)
        rows = meta.num_rows
        per_row = size / max(rows, 1)
        step = _slice_rows(size, rows)
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
    row_dtype = np.int32 if n <= INT32_MAX else np.int64  # (sessions of a file: at most its rows)
    local = np.fromiter(
        (0 if sid is None else local_of.setdefault(sid, len(local_of)) for sid in _session_ids(sids, log_file)),
        dtype=row_dtype,
        count=n,
    )
    unique_ids = list(local_of)
    if only is not None:
        wanted = np.array([sid in only for sid in unique_ids] or [False])
        keep &= wanted[local]
    seq_values, seq_valid = int64_values(table.column("seq").combine_chunks())
    file_rows = np.arange(n, dtype=row_dtype)
    return FileIndex(row_groups, unique_ids, *(a[keep] for a in (local, ~seq_valid, seq_values, file_rows)))


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

