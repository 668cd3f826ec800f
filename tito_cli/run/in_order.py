"""Outputs handed out in session-id order, whatever order they arrive in (early ones parked in a spill file)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO

import pyarrow as pa

from ..turns import Reject
from .corpus import SessionOutput

__all__ = ["InOrder"]


class InOrder:
    """Hands out outputs in session-id order, whatever order they arrive in.

    An output that arrives before its turn is parked: its counts stay in
    memory, its sample rows go to an anonymous spill file (Arrow IPC) and are
    read back when its turn comes.  Logs whose sessions finish in id order
    never touch the file.
    """

    def __init__(self, order: Iterable[str], spill_dir: str | os.PathLike[str] | None) -> None:
        # (The index's own list, not a copy: a string a session is all the run keeps of it.)
        self._order = order if isinstance(order, Sequence) else list(order)
        self._next = 0
        self._parked: dict[str, SessionOutput | Reject] = {}
        self._spilled: dict[str, tuple[int, int]] = {}
        self._spill_dir = None if spill_dir is None else Path(spill_dir)
        self._spill: IO[bytes] | None = None

    def push(self, output: SessionOutput | Reject) -> Iterator[SessionOutput | Reject]:
        if self._next < len(self._order) and output.session_id == self._order[self._next]:
            self._next += 1
            yield output
            yield from self._drain()
            return
        if isinstance(output, SessionOutput) and output.table is not None:
            self._park_table(output)
        self._parked[output.session_id] = output

    def finish(self) -> Iterator[SessionOutput | Reject]:
        yield from self._drain()
        if self._parked:  # pragma: no cover - every indexed session produces exactly one output
            raise RuntimeError(f"outputs of sessions not in the index: {sorted(self._parked)[:5]}")

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def _drain(self) -> Iterator[SessionOutput | Reject]:
        while self._next < len(self._order) and self._order[self._next] in self._parked:
            output = self._parked.pop(self._order[self._next])
            self._next += 1
            if isinstance(output, SessionOutput) and output.table is None:
                output.table = self._unpark_table(output.session_id)
            yield output

    def _park_table(self, output: SessionOutput) -> None:
        assert output.table is not None
        if self._spill is None:
            # Anonymous (unlinked at once): nothing is left behind, whatever happens.
            self._spill = tempfile.TemporaryFile(prefix=".tito-spill-", dir=self._spill_dir)  # noqa: SIM115
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, output.table.schema) as stream:
            stream.write_table(output.table)
        data = sink.getvalue()
        offset = self._spill.seek(0, os.SEEK_END)
        self._spill.write(data)
        self._spilled[output.session_id] = (offset, data.size)
        output.table = None

    def _unpark_table(self, session_id: str) -> pa.Table:
        assert self._spill is not None
        offset, size = self._spilled.pop(session_id)
        self._spill.seek(offset)
        data = self._spill.read(size)
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
