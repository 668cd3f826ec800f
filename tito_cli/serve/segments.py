"""The journal's segments written out as Parquet: when, how, and what is left when that fails.

Every ``flush_every`` seconds (or :data:`ROTATE_ROWS` rows, or :data:`ROTATE_BYTES` bytes) the journal
moves to a new segment and the old segment's rows, taken from the writer's buffer, are written as the
Parquet files named after it; the segment is removed once they are in place.  A write that fails keeps
the segment and its rows and sets :attr:`Segments.problem` (the recorder then refuses new turns, 503,
and ``/healthz`` fails) until a retry succeeds: the buffer stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..capture.journal import Journal, Segment
from ..capture.writer import TurnLogWriter

__all__ = ["ROTATE_BYTES", "ROTATE_ROWS", "Segments", "reason"]

log = logging.getLogger("tito.serve")

#: A segment is written out when it holds this many rows or bytes (or is ``flush_every`` old).
ROTATE_ROWS = 4096
ROTATE_BYTES = 256 << 20

_Rows = list[dict[str, Any]]


class Segments:
    """The segment being filled (its rows and bytes) and the ones not written out yet."""

    def __init__(self, directory: Path, journal: Journal, writer: TurnLogWriter, lock: threading.Lock) -> None:
        self.directory = directory
        self.journal = journal
        self.writer = writer
        #: Held by an append and its buffered row, and by a rotation (never one between the other's two steps).
        self.lock = lock
        self._write_lock = threading.Lock()
        #: Why the last write as Parquet failed (cleared by the next that succeeds), else None.
        self.problem: str | None = None
        self.rows = 0
        self._bytes = 0
        self._oldest: float | None = None
        self._unwritten: list[tuple[Segment, _Rows, _Rows]] = []

    def grow(self, size: int) -> None:
        """One more row of ``size`` bytes in the current segment (lock held)."""
        self.rows += 1
        self._bytes += size
        if self._oldest is None:
            self._oldest = time.monotonic()

    def due(self, flush_every: float) -> bool:
        """Whether a rotation is due: the current segment is old or large enough, or an earlier one is unwritten."""
        old = self._oldest is not None and time.monotonic() - self._oldest >= flush_every
        return old or self.rows >= ROTATE_ROWS or self._bytes >= ROTATE_BYTES or bool(self._unwritten)

    async def tick(
        self, flush_every: float, run: Callable[..., Awaitable[Any]], other_problem: Callable[[], str | None]
    ) -> None:
        """Rotate whenever one is due (``run``: in a worker thread), until cancelled."""
        tick = max(0.05, min(1.0, flush_every / 4))
        while True:
            await asyncio.sleep(tick)
            if self.due(flush_every):
                with contextlib.suppress(Exception):
                    await run(self.rotate, other_problem())

    def rotate(self, other_problem: str | None = None) -> None:
        """Move the journal to a new segment and write the old one's rows as Parquet (in a worker thread).

        ``other_problem``: a problem already reported (an append's), not logged again.
        """
        with self.lock:
            if self.rows:
                try:
                    segment = self.journal.rotate()
                except OSError as exc:
                    self._failed(exc, other_problem)
                    return
                if segment is not None:
                    self._unwritten.append((segment, *self.writer.take_buffer()))
                self.rows = self._bytes = 0
                self._oldest = None
        with self._write_lock:
            while self._unwritten:
                segment, turns, sessions = self._unwritten[0]
                try:
                    self._write(segment, turns, sessions)
                except OSError as exc:
                    self._failed(exc, other_problem)
                    return
                self._unwritten.pop(0)
        if self.problem is not None:
            log.warning("tito serve: the turn log can be written again")
            self.problem = None

    def _write(self, segment: Segment, turns: _Rows, sessions: _Rows) -> None:
        for rows, kind in ((turns, "turns"), (sessions, "sessions")):
            if rows:
                with contextlib.suppress(FileExistsError):  # written before a failed retire
                    if kind == "turns":
                        self.writer.write_rows(rows, [], segment.number)
                    else:
                        self.writer.write_rows([], rows, segment.number)
                rows.clear()
        self.journal.retire(segment)

    def left(self) -> tuple[int, list[str]]:
        """The rows not written as Parquet and the journal segments that hold them (after a last rotation)."""
        rows = self.rows + sum(len(turns) + len(sessions) for _, turns, sessions in self._unwritten)
        names = [segment.path.name for segment, _, _ in self._unwritten]
        if self.rows:
            names.append(self.journal.current.path.name)
        return rows, names

    def _failed(self, exc: OSError, other_problem: str | None) -> None:
        why = reason(exc)
        if self.problem != why and other_problem != why:
            log.error(
                "tito serve: the turn log in %s cannot be written (new turns are refused until it can): %s",
                self.directory,
                why,
            )
        self.problem = why


def reason(exc: OSError) -> str:
    """Why a write failed, without the paths (the answers to clients carry it)."""
    return exc.strerror or str(exc).split(": ", 1)[0]
