"""A string column kept compressed in memory, a chunk of rows at a time, read back one cell at a time.

The sessions table keeps every session's ``label`` and ``metadata`` for the
whole run (a rebuild looks them up session by session).  Kept decoded, that
is the one part of a rebuild's memory that grows with the log's sessions
besides the session ids: about 100 bytes a session for the qwen3 workload's
metadata, 10 MiB at 100,000 sessions.  Kept as zstd-compressed Arrow IPC
chunks of :data:`CHUNK_ROWS` rows it is a fraction of that, and a lookup
decodes its chunk once: a rebuild looks sessions up in about the order the
sessions file lists them (both follow the order sessions finish), so each
chunk is decoded about once a run.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = ["CHUNK_ROWS", "PackedStrings"]

#: Rows a compressed chunk holds: small enough that a lookup out of order decodes little.
CHUNK_ROWS = 2048

_OPTIONS = pa.ipc.IpcWriteOptions(compression="zstd")


class PackedStrings:
    """A string (or large string) column, compressed by chunks; ``packed[row]`` is a ``str`` or ``None``."""

    __slots__ = ("_chunks", "_decoded", "_rows", "nbytes")

    def __init__(self, column: pa.Array) -> None:
        schema = pa.schema([pa.field("value", column.type)])
        self._rows = len(column)
        self._chunks: list[pa.Buffer] = []
        for start in range(0, len(column), CHUNK_ROWS):
            batch = pa.record_batch([column.slice(start, CHUNK_ROWS)], schema=schema)
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, schema, options=_OPTIONS) as stream:
                stream.write_batch(batch)
            self._chunks.append(sink.getvalue())
        #: Compressed bytes kept.
        self.nbytes = sum(chunk.size for chunk in self._chunks)
        #: The last chunk decoded, with its number (one attribute: a lookup from another thread sees a pair).
        self._decoded: tuple[int, pa.Array] | None = None

    def __len__(self) -> int:
        return self._rows

    def __getitem__(self, row: int) -> str | None:
        if not 0 <= row < self._rows:
            raise IndexError(row)
        number, offset = divmod(row, CHUNK_ROWS)
        decoded = self._decoded
        if decoded is None or decoded[0] != number:
            decoded = (number, pa.ipc.open_stream(self._chunks[number]).read_next_batch().column(0))
            self._decoded = decoded
        value: str | None = decoded[1][offset].as_py()
        return value
