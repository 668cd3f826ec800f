"""A turn log (SPEC §2) opened for reading: its files, its sessions table, its sessions.

log = TurnLog.open(["logs/"])          # footers only; bad files fail here (files.py)
sessions = log.read_sessions()          # rewards and index fields, conflicts reported
for rows in log.iter_sessions():        # one session at a time, in session-id order (index_pass.py, rows.py)
    turns = parse_session(rows)         # raises InvalidSessionError (validate.py)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..errors import SchemaError
from .files import LogFile, classify_file, discover_files, open_parquet, require_logs
from .index import LogIndex, ReadBatch
from .index_pass import FileIndex, FileMap, assemble_index, build_index, index_parquet
from .rows import SessionRows, read_batch
from .sessions import SessionsTable, read_sessions_table

__all__ = ["TurnLog"]


def _one_tokenizer(files: Sequence[LogFile]) -> None:
    """Raise :class:`SchemaError` when the files name different tokenizers.

    Token ids mean something only with their tokenizer: decoding (or
    training) one file's ids with another's tokenizer would be silently wrong.
    """
    first: LogFile | None = None
    for log_file in files:
        if not log_file.tokenizer:
            continue
        if first is None:
            first = log_file
        elif log_file.tokenizer != first.tokenizer:
            raise SchemaError(
                f"names tokenizer {log_file.tokenizer!r}, but {first.path} names {first.tokenizer!r}: "
                "a log's token ids must all come from one tokenizer",
                file=log_file.path,
                tip="rebuild the files of each tokenizer separately",
            )


class TurnLog:
    """A set of turn-log files, classified and schema-checked (their tokenizers agree)."""

    def __init__(self, files: Sequence[LogFile]) -> None:
        self.files = list(files)
        _one_tokenizer(self.files)
        self.turn_files = [f for f in self.files if f.table == "turns"]
        self.session_files = [f for f in self.files if f.table == "sessions"]
        self._index: LogIndex | None = None

    @classmethod
    def open(
        cls,
        paths: Iterable[str | Path],
        *,
        exclude: Iterable[Path] = (),
        index: bool = False,
        map_files: FileMap | None = None,
    ) -> TurnLog:
        """The log's files, classified (footers only; a bad file raises, naming it).

        With ``index``, the first pass of the read path (:meth:`index`) runs
        in the same per-file pass: each file is opened and its footer parsed
        once, not twice; ``map_files`` (a worker pool's ``map``) runs that
        pass over the files in parallel (about half a millisecond a file:
        seconds, before any session can be rebuilt, on a log of thousands).
        """
        paths = list(paths)
        found = require_logs(discover_files(paths, exclude=exclude), paths)
        if not index:
            return cls([classify_file(p) for p in found])
        opened = list((map_files or map)(_open_file, found))
        log = cls([log_file for log_file, _ in opened])
        log._index = assemble_index([part for _, part in opened if part is not None])
        return log

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
        """The sessions table: each row checked, usable rows by session id, the others reported.

        Rows are checked in file order, a chunk at a time; a session id with
        several rows keeps the first usable one, and rows that disagree make
        the session invalid.  What is kept is columns (:class:`SessionInfos`).
        """
        return read_sessions_table(self.session_files, self._index.session_ids if self._index is not None else [])

    def session_ids(self) -> Sequence[str]:
        """Every session id that has turns, in code-point order (the index's: not to be changed)."""
        return self.index().session_ids

    def index(self, only: set[str] | None = None) -> LogIndex:
        """Where every session's rows are (first pass: ``session_id`` and ``seq`` only).

        The whole log's index is cached (``open(index=True)`` builds it as it
        opens the files); an ``only`` index is cut from it when it exists
        (``tito inspect`` finds the id, then reads that session), and built
        afresh otherwise.
        """
        if self._index is not None:
            if only is None:
                return self._index
            return self._index.only(only)
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


def _open_file(path: Path) -> tuple[LogFile, FileIndex | None]:
    """One file of ``TurnLog.open(index=True)``: classified and, if it holds turns, indexed, from one open."""
    with open_parquet(path) as parquet:
        log_file = classify_file(path, parquet)
        part = index_parquet(log_file, parquet, None) if log_file.table == "turns" else None
    return log_file, part
