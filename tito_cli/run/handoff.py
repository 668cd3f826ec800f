"""Sample rows from a worker to the writer through a file instead of the result pipe."""

from __future__ import annotations

import errno
import os
import tempfile

import pyarrow as pa

from ..schema import SAMPLES_SCHEMA
from ..turns import Reject
from .corpus import SessionOutput

__all__ = ["Handoff"]


class Handoff:
    """Sample rows from a worker to the writer through a file instead of the result pipe.

    Pickling a batch's tables through the pipe copies every token three
    times more (pickle, pipe, unpickle), on the writer's side too, and the
    writer is the one serial stage.  A worker writes its batch's rows to one
    Arrow IPC file; the writer maps it and hands the tables to the Parquet
    writer without copying them.  The file is unlinked as soon as it is
    mapped.
    """

    @staticmethod
    def write(outputs: list[SessionOutput | Reject], folder: str) -> None:
        rebuilt = [o for o in outputs if isinstance(o, SessionOutput)]
        try:
            fd, path = tempfile.mkstemp(prefix="batch-", suffix=".arrow", dir=folder)
        except FileNotFoundError:
            if os.path.isdir(folder):
                raise
            # No tito process removes a live run's folder (lifetime.py): something else cleaned $TMPDIR.
            message = (
                "the handoff folder was removed while the rebuild ran, and not by tito "
                f"(something cleaning {os.path.dirname(folder)}? set TMPDIR to a folder of its own)"
            )
            raise FileNotFoundError(errno.ENOENT, message, folder) from None
        with os.fdopen(fd, "wb") as sink, pa.ipc.new_file(sink, SAMPLES_SCHEMA) as stream:
            batch_number = 0
            for output in rebuilt:
                assert output.table is not None
                batches = output.table.to_batches()
                for record_batch in batches:
                    stream.write_batch(record_batch)
                output.handoff = (path, batch_number, len(batches))
                batch_number += len(batches)
                output.table = None

    @staticmethod
    def read(outputs: list[SessionOutput | Reject]) -> None:
        readers: dict[str, pa.ipc.RecordBatchFileReader] = {}
        for output in outputs:
            if not isinstance(output, SessionOutput) or output.handoff is None:
                continue
            path, first, count = output.handoff
            if path not in readers:
                readers[path] = pa.ipc.open_file(pa.memory_map(path))
                os.unlink(path)  # the mapping stays valid; nothing is left behind
            reader = readers[path]
            output.table = pa.Table.from_batches(
                [reader.get_batch(i) for i in range(first, first + count)], schema=SAMPLES_SCHEMA
            )
            output.handoff = None
