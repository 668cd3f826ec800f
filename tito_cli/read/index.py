"""The session index: where every session's rows are, and the batches a reader reads them in.

The first pass (:mod:`.index_pass`) builds it from ``session_id`` and ``seq``
alone; the second (:mod:`.rows`) reads a :class:`ReadBatch` of its sessions.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

__all__ = [
    "LogIndex",
    "ReadBatch",
    "RowGroup",
    "SessionPlace",
    "SessionPlaces",
    "groups_of",
    "log_row_dtype",
    "row_group_starts",
]


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

    Made by :class:`LogIndex` when asked for: the index itself keeps no
    object per session (see :class:`LogIndex`).
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
    its rows are one flat array of *log rows* (every row group's rows
    numbered in turn, four bytes each), a session's rows contiguous and in
    ``seq`` order.  :class:`SessionPlace` values, with each row's row group
    and row inside it, are made on demand.  Sessions are named by their
    position in ``session_ids``.
    """

    __slots__ = ("_group_starts", "_ids", "_session_bytes", "_starts", "log_rows", "row_groups")

    def __init__(self, row_groups: list[RowGroup], places: Mapping[str, SessionPlace] | None = None) -> None:
        """An index of ``places`` (any order); :func:`assemble_index` builds the arrays directly."""
        chosen = sorted((places or {}).values(), key=lambda p: p.session_id)
        self.row_groups = row_groups
        self._group_starts = row_group_starts(row_groups)
        self._ids: list[str] = [p.session_id for p in chosen]
        lengths = np.array([len(p.groups) for p in chosen], dtype=np.int64)
        self._starts = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
        rows = [self._group_starts[p.groups] + p.rows for p in chosen]
        self.log_rows = np.concatenate(rows).astype(log_row_dtype(self._group_starts[-1])) if chosen else _NO_ROWS
        self._session_bytes = np.array([p.nbytes for p in chosen], dtype=np.int64)

    @classmethod
    def from_arrays(
        cls,
        row_groups: list[RowGroup],
        session_ids: Sequence[str],
        starts: np.ndarray,
        log_rows: np.ndarray,
        session_bytes: np.ndarray,
    ) -> LogIndex:
        """An index of ``session_ids`` (sorted, unique), session k's rows ``log_rows[starts[k]:starts[k + 1]]``."""
        index = cls(row_groups)
        index._ids = session_ids if isinstance(session_ids, list) else list(session_ids)
        index._starts = starts.astype(np.int64, copy=False)
        index.log_rows = log_rows.astype(log_row_dtype(index._group_starts[-1]), copy=False)
        index._session_bytes = session_bytes.astype(np.int64, copy=False)
        return index

    def __len__(self) -> int:
        return len(self._ids)

    def __reduce__(self) -> tuple[Any, ...]:
        # (slots, no __dict__: pickled through the flat arrays, for worker tasks)
        return (
            LogIndex.from_arrays,
            (self.row_groups, self._ids, self._starts, self.log_rows, self._session_bytes),
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
        log_rows = self.log_rows[lo:hi]
        groups = self.group_of(log_rows)
        rows = log_rows - self._group_starts[groups]
        return SessionPlace(self._ids[position], groups, rows, int(self._session_bytes[position]))

    def group_of(self, log_rows: np.ndarray) -> np.ndarray:
        """The row group (number into :attr:`row_groups`) holding each of ``log_rows``."""
        return groups_of(self._group_starts, log_rows)

    def subset(self, positions: np.ndarray) -> LogIndex:
        """The index of the sessions at ``positions`` (increasing), with the same row groups."""
        lengths = np.diff(self._starts)[positions]
        rows = _concatenate_ranges(self._starts[positions], lengths)
        return LogIndex.from_arrays(
            self.row_groups,
            [self._ids[int(k)] for k in positions],
            np.concatenate(([0], np.cumsum(lengths))),
            self.log_rows[rows],
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
        # Row groups are numbered in log-row order: a session's lowest row is in its lowest row group.
        lowest, highest = np.minimum.reduceat(self.log_rows, starts), np.maximum.reduceat(self.log_rows, starts)
        return self.group_of(lowest), self.group_of(highest)

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


_NO_ROWS = np.zeros(0, dtype=np.int64)


def row_group_starts(row_groups: Sequence[RowGroup]) -> np.ndarray:
    """Each row group's first log row, and the log's row count last (log rows: every row group's rows in turn)."""
    return np.concatenate(([0], np.cumsum([g.num_rows for g in row_groups], dtype=np.int64))).astype(np.int64)


def groups_of(starts: np.ndarray, log_rows: np.ndarray) -> np.ndarray:
    """The row group holding each of ``log_rows``, given :func:`row_group_starts`."""
    groups: np.ndarray = np.searchsorted(starts, log_rows, side="right").astype(np.int32) - 1
    return groups


def log_row_dtype(log_rows: int) -> type[np.signedinteger[Any]]:
    """Four bytes a log row unless a log of ``log_rows`` rows has more than that counts."""
    return np.int32 if log_rows <= np.iinfo(np.int32).max else np.int64


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


