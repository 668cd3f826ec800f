"""``--format parquet`` (the default): the samples file (SPEC §5), one row per sample, slime ``Sample`` column names."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._atomic import StagedFile
from .._parquet import parquet_writer
from ..errors import OutputError
from ..schema import samples_schema, table_metadata
from .base import Sink, SinkContext
from .samples import token_count

__all__ = ["SamplesWriter", "StreamedParquetFile"]


class StreamedParquetFile(Sink):
    """A Parquet file written a row group at a time, staged beside ``out`` until published.

    Sessions' tables are buffered and written as row groups of about
    ``row_group_tokens`` tokens (or ``row_group_sessions`` sessions, when
    given), cut between sessions after the session that reaches either size,
    so the file's bytes depend only on the sessions written and their order.
    A subclass says what a row group's rows become (:meth:`_row_group_table`).
    """

    def __init__(
        self,
        out: Path,
        context: SinkContext,
        schema: pa.Schema,
        *,
        row_group_tokens: int,
        row_group_sessions: int | None = None,
        **writer_options: Any,
    ) -> None:
        super().__init__(out, context)
        self.check_target(out)
        self.row_group_tokens = row_group_tokens
        self.row_group_sessions = row_group_sessions
        self.schema = schema
        try:
            self._staged = StagedFile(out)
        except OSError as exc:
            raise OutputError(f"cannot write ({exc})", file=out) from None
        self._writer = parquet_writer(self._staged.path, schema, compression="zstd", **writer_options)
        self._tables: list[pa.Table] = []
        self._buffered_tokens = 0

    def _row_group_table(self, samples: pa.Table) -> pa.Table:
        """The rows the buffered samples become in the file (one per sample)."""
        raise NotImplementedError

    def add(self, table: pa.Table) -> None:
        """Buffer one session's rows (as made by :func:`~tito_cli.export.samples.session_table`)."""
        if table.num_rows == 0:
            return
        self._tables.append(table)
        self._buffered_tokens += token_count(table)
        full = self.row_group_sessions is not None and len(self._tables) >= self.row_group_sessions
        if self._buffered_tokens >= self.row_group_tokens or full:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if not self._tables:
            return
        table = self._row_group_table(pa.concat_tables(self._tables))
        self._writer.write_table(table)
        self.samples_written += table.num_rows
        self._tables = []
        self._buffered_tokens = 0
        del table
        # Encoding a row group is a run's largest passing allocation, freed all at once; kept (the
        # command line's allocator option), its pages seldom fit what comes next and RSS ratchets up
        # over a long run.  Hand them back here, a few times a run (docs/notes/performance.md, Decisions).
        pa.default_memory_pool().release_unused()

    def close(self) -> list[StagedFile]:
        """Write what is buffered and finish the file (still under its temporary name)."""
        self._write_row_group()
        self._writer.close()
        self.files = [self.out]
        return [self._staged]

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        self._staged.discard()


class SamplesWriter(StreamedParquetFile):
    """Streams sessions' samples into a Parquet file, staged beside ``out`` until published.

    Row groups are cut at about ``row_group_tokens`` tokens or
    ``row_group_sessions`` sessions, whichever comes first, so memory stays
    bounded by a row group, not the corpus (each buffered session is a small
    Arrow table of its own, some kilobytes of objects and buffers however few
    its tokens: by tokens alone, a log of many tiny sessions was buffered
    whole).  The bytes do not depend on how many workers produced the
    sessions, nor on the runner.
    """

    name = "parquet"
    summary = "the samples table (docs/spec.md §5, slime Sample column names), in row groups"

    def __init__(
        self, out: Path, context: SinkContext, *, row_group_tokens: int = 2 << 20, row_group_sessions: int = 1024
    ) -> None:
        meta = table_metadata("samples", context.tokenizer)
        meta[b"tito.policy"] = json.dumps(context.policy.describe(), sort_keys=True).encode()
        # Token ids are nearly unique values: a dictionary is built and thrown away, so skip it.
        # Min/max statistics of the list columns (tokens, masks, logprobs) help no reader
        # and cost about a sixth of the write: keep them for the scalar columns only.
        schema = samples_schema(context.policy.routed_experts)
        scalar_columns = [f.name for f in schema if not pa.types.is_list(f.type)]
        super().__init__(
            out,
            context,
            schema.with_metadata(meta),
            row_group_tokens=row_group_tokens,
            row_group_sessions=row_group_sessions,
            use_dictionary=["session_id", "label", "status"],
            write_statistics=scalar_columns,
        )

    def _row_group_table(self, samples: pa.Table) -> pa.Table:
        # Not combined into one chunk per column: the writer streams chunks into the same
        # pages (the bytes are the same either way), and combining copies every token once more.
        return samples.replace_schema_metadata(self.schema.metadata)
