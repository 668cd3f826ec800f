"""Sample rows from a worker to the writer through a file instead of the result pipe."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Iterable, Iterator

import pyarrow as pa

from ..turns import Reject
from .corpus import SessionOutput

__all__ = ["RELEASE_BYTES", "Handoff"]

#: A worker hands its allocator's free pages back to the system after every this many bytes of
#: sample rows it writes (docs/performance.md, "Memory with workers").
RELEASE_BYTES = 8 << 20


class Handoff:
    """Sample rows from a worker to the writer through a file instead of the result pipe, one session at a time.

    Pickling a batch's tables through the pipe copies every token three
    times more (pickle, pipe, unpickle), on the writer's side too, and the
    writer is the one serial stage.  A worker streams each session's rows
    into its batch's Arrow IPC file as soon as the session is rebuilt
    (:meth:`add`), keeping only the session's counts, so what it holds does
    not grow with its batch.  The writer reads the rows back one session at
    a time, when that session's turn comes (:meth:`read`), into memory it
    frees once the session is written: neither side holds a batch's rows.
    The file is unlinked as soon as the writer opens it.

    The command line keeps pyarrow's freed pages for reuse (``MIMALLOC_PURGE_DELAY``), and
    only the samples writer hands them back, after each row group; a worker writes none, so its
    resident memory ratcheted up batch after batch while the pages it held went unused.  It
    hands them back every :data:`RELEASE_BYTES` of sample rows instead.
    """

    def __init__(self, folder: str) -> None:
        try:
            fd, self.path = tempfile.mkstemp(prefix="batch-", suffix=".arrow", dir=folder)
        except FileNotFoundError:
            if os.path.isdir(folder):
                raise
            # No tito process removes a live run's folder (lifetime.py): something else cleaned $TMPDIR.
            message = (
                "the handoff folder was removed while the rebuild ran, and not by tito "
                f"(something cleaning {os.path.dirname(folder)}? set TMPDIR to a folder of its own)"
            )
            raise FileNotFoundError(errno.ENOENT, message, folder) from None
        self._sink = os.fdopen(fd, "wb")
        # Opened with the first table's schema (the samples table's, with routed experts when asked for).
        self._stream: pa.ipc.RecordBatchFileWriter | None = None
        self._batches = 0
        self._unreleased = 0

    def add(self, output: SessionOutput | Reject) -> SessionOutput | Reject:
        """Write ``output``'s rows to the file; ``output`` keeps where they are instead of its table."""
        if isinstance(output, SessionOutput) and output.table is not None:
            batches = output.table.to_batches()
            if self._stream is None:
                self._stream = pa.ipc.new_file(self._sink, output.table.schema)
            for record_batch in batches:
                self._stream.write_batch(record_batch)
            output.handoff = (self.path, self._batches, len(batches))
            self._batches += len(batches)
            self._unreleased += output.table.nbytes
            output.table = None
            if self._unreleased >= RELEASE_BYTES:
                pa.default_memory_pool().release_unused()
                self._unreleased = 0
        return output

    def close(self) -> None:
        try:
            if self._stream is not None:
                self._stream.close()
        finally:
            self._sink.close()

    def __enter__(self) -> Handoff:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def write(outputs: Iterable[SessionOutput | Reject], folder: str) -> list[SessionOutput | Reject]:
        """Every output's rows into one new file in ``folder``, as they come (the worker's side)."""
        with Handoff(folder) as handoff:
            return [handoff.add(output) for output in outputs]

    @staticmethod
    def read(outputs: list[SessionOutput | Reject]) -> Iterator[SessionOutput | Reject]:
        """Each output with its rows read back from its handoff file (the writer's side), one at a time.

        ``outputs`` is emptied as it goes: an output handed on is no longer the list's, so
        its rows are freed once the caller is done with them, not when the batch is (a
        batch's list kept every table it had read until its last session was written).
        Read, not mapped: a mapped file's pages stay resident in this process
        until the last of its tables is freed, that is the whole batch's rows.
        """
        readers: dict[str, pa.ipc.RecordBatchFileReader] = {}
        files: list[pa.NativeFile] = []
        outputs.reverse()
        try:
            while outputs:
                output = outputs.pop()
                if isinstance(output, SessionOutput) and output.handoff is not None:
                    path, first, count = output.handoff
                    if path not in readers:
                        files.append(pa.OSFile(path))
                        readers[path] = pa.ipc.open_file(files[-1])
                        os.unlink(path)  # the open file stays readable; nothing is left behind
                    reader = readers[path]
                    output.table = pa.Table.from_batches(
                        [reader.get_batch(i) for i in range(first, first + count)], schema=reader.schema
                    )
                    output.handoff = None
                yield output
        finally:
            for file in files:
                file.close()
