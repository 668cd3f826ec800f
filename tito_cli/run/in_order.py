"""Outputs handed out in session-id order, whatever order they arrive in (early ones parked in a spill file)."""

from __future__ import annotations

import bisect
import dataclasses
import json
import os
import struct
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

import numpy as np
import pyarrow as pa

from ..algorithm.session import SessionReport
from ..turns import Reject
from .corpus import SessionOutput

__all__ = ["InOrder"]

#: A parked output's record in the spill file starts with the sizes of its two parts.
_SIZES = struct.Struct("<QQ")


class InOrder:
    """Hands out outputs in session-id order, whatever order they arrive in.

    An output that arrives before its turn is parked whole in an anonymous
    spill file: its counts as JSON, its sample rows as Arrow IPC.  Memory
    keeps only where it is, in one array over every session (8 bytes a
    session, made on the first park), not an object per parked session: a
    log whose session ids are unrelated to the order sessions finish in
    (random ids: most harnesses name sessions so) parks nearly every session
    before the first id in code-point order arrives.  Logs whose sessions
    finish in id order never touch the file.
    """

    def __init__(self, order: Sequence[str], spill_dir: str | os.PathLike[str] | None) -> None:
        """``order``: every session id, in code-point order (the index's own list, not a copy)."""
        self._order = order
        self._next = 0
        self._spill_dir = None if spill_dir is None else Path(spill_dir)
        self._spill: IO[bytes] | None = None
        #: Per session (its position in ``order``): where its parked output starts in the spill
        #: file (-1: not parked).  There, the sizes of its encoded counts and of its rows' IPC stream
        #: (:data:`_SIZES`) come first.
        self._offsets = np.zeros(0, dtype=np.int64)

    def push(self, output: SessionOutput | Reject) -> Iterator[SessionOutput | Reject]:
        if self._next < len(self._order) and output.session_id == self._order[self._next]:
            self._next += 1
            yield output
            yield from self._drain()
            return
        self._park(self._position(output.session_id), output)

    def finish(self) -> Iterator[SessionOutput | Reject]:
        yield from self._drain()
        if self._offsets.size and (self._offsets >= 0).any():  # pragma: no cover - one output a session
            waiting = [self._order[k] for k in np.flatnonzero(self._offsets >= 0)[:5].tolist()]
            raise RuntimeError(f"outputs parked but never handed out: {waiting}")

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def _position(self, session_id: str) -> int:
        k = bisect.bisect_left(self._order, session_id)
        if k == len(self._order) or self._order[k] != session_id or k < self._next:
            raise RuntimeError(f"an output of session {session_id!r}, which is not in the index or was handed out")
        return k

    def _drain(self) -> Iterator[SessionOutput | Reject]:
        while self._next < self._offsets.size and self._offsets[self._next] >= 0:
            output = self._unpark(self._next)
            self._next += 1
            yield output

    def _park(self, position: int, output: SessionOutput | Reject) -> None:
        if self._spill is None:
            # Anonymous (unlinked at once): nothing is left behind, whatever happens.
            self._spill = tempfile.TemporaryFile(prefix=".tito-spill-", dir=self._spill_dir)  # noqa: SIM115
            self._offsets = np.full(len(self._order), -1, dtype=np.int64)
        table = output.table if isinstance(output, SessionOutput) else None
        if isinstance(output, SessionOutput):
            output.table = None
        head = _encode(output)
        spill = self._spill
        offset = spill.seek(0, os.SEEK_END)
        spill.write(_SIZES.pack(len(head), 0))
        spill.write(head)
        if table is not None:
            # Straight into the file: a buffer in between would come from pyarrow's pool, which keeps
            # what it frees (cli/native_env.py), a stream of them per session parked.
            with pa.ipc.new_stream(pa.PythonFile(spill, mode="w"), table.schema) as stream:
                stream.write_table(table)
            end = spill.tell()
            spill.seek(offset)
            spill.write(_SIZES.pack(len(head), end - offset - _SIZES.size - len(head)))
        self._offsets[position] = offset

    def _unpark(self, position: int) -> SessionOutput | Reject:
        assert self._spill is not None
        self._spill.seek(int(self._offsets[position]))
        head, body = _SIZES.unpack(self._spill.read(_SIZES.size))
        output = _decode(self._spill.read(head))
        if body and isinstance(output, SessionOutput):
            # Read into pyarrow's pool (which the samples writer purges after each row group), not
            # into a Python bytes object per session from the C heap.
            output.table = pa.ipc.open_stream(pa.PythonFile(self._spill, mode="r")).read_all()
        self._offsets[position] = -1
        return output


def _encode(output: SessionOutput | Reject) -> bytes:
    """A parked output but its rows, as JSON (its fields are numbers, strings and their lists and maps)."""
    if isinstance(output, Reject):
        return json.dumps({"reject": dataclasses.asdict(output)}).encode()
    report = dataclasses.asdict(output.report)
    return json.dumps({"session": output.session_id, "report": report, "handoff": output.handoff}).encode()


def _decode(data: bytes) -> SessionOutput | Reject:
    record = json.loads(data)
    if "reject" in record:
        return Reject(**record["reject"])
    report = record["report"]
    report["seq_gaps"] = tuple(tuple(gap) for gap in report["seq_gaps"])
    report["rejected_samples"] = tuple(report["rejected_samples"])  # JSON has lists only; the report keeps tuples
    handoff = record["handoff"]
    return SessionOutput(record["session"], None, SessionReport(**report), None if handoff is None else tuple(handoff))
