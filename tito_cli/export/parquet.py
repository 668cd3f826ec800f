"""Writing samples (SPEC §5): one Parquet row per sample, slime ``Sample`` column names."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._arrow import list_column, primitive_array, string_array
from .._atomic import atomic_path
from ..algorithm.linearize import LinearizedSample
from ..algorithm.policy import Policy
from ..algorithm.session import SessionResult
from ..schema import SAMPLES_SCHEMA, table_metadata

__all__ = ["SamplesWriter", "provenance", "session_table"]


def provenance(sample: LinearizedSample) -> dict[str, Any]:
    """Where a sample came from: leaf, segment, the turns packed and those trained, the fork."""
    return {
        "leaf": sample.leaf,
        "segment": sample.segment,
        "turns": list(sample.seqs),
        "trained_turns": list(sample.trained_seqs),
        "fork": sample.fork.value if sample.fork is not None else None,
    }


def sample_metadata(result: SessionResult, sample: LinearizedSample) -> str:
    """The session's metadata plus provenance under ``"tito"``, as deterministic JSON.

    ``finished`` is false for a session rebuilt without a sessions row: its reward of 0.0 is
    not the environment's verdict (the harness died), and a trainer may want to leave it out.
    """
    meta = dict(result.info.metadata or {})
    meta["tito"] = {**provenance(sample), "finished": result.info.finished}
    return json.dumps(meta, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def session_table(result: SessionResult) -> pa.Table:
    """One session's samples as rows of the samples table (SPEC §5), in emission order.

    This is the unit that workers send back to the writer: plain Arrow
    columns, no routing tree, no turns.
    """
    samples = result.samples
    info = result.info
    n = len(samples)
    # Built from buffers (tito_cli._arrow): pa.array would import pandas.
    columns = {
        "session_id": string_array([result.session_id] * n),
        "sample_index": primitive_array(np.arange(n, dtype=np.int32), pa.int32()),
        # The list columns keep each sample's arrays (linearize made them): no copy here.
        "tokens": list_column([s.tokens for s in samples], pa.int32()),
        "response_length": primitive_array([s.response_length for s in samples], pa.int32()),
        "loss_mask": list_column([s.loss_mask for s in samples], pa.int8()),
        "rollout_log_probs": list_column([s.rollout_log_probs for s in samples], pa.float32()),
        "reward": primitive_array(result.rewards, pa.float64()),
        "index": primitive_array([info.index] * n, pa.int64()),
        "group_index": primitive_array([info.group_index] * n, pa.int64()),
        "label": string_array([info.label] * n),
        "status": string_array(["completed"] * n),
        "metadata": string_array([sample_metadata(result, s) for s in samples]),
    }
    return pa.table(columns, schema=SAMPLES_SCHEMA)


class SamplesWriter:
    """Streams sessions' samples into a Parquet file that appears atomically on :meth:`close`.

    Rows are buffered and written as row groups of about ``row_group_tokens``
    tokens, so memory stays bounded by a row group, not the corpus.  Row
    groups are cut between sessions, after the session that reaches the
    size, so the file's bytes depend only on the sessions written and their
    order (not on how many workers produced them).
    """

    def __init__(
        self,
        path: str | Path,
        policy: Policy,
        *,
        tokenizer: str | None = None,
        row_group_tokens: int = 2 << 20,
    ) -> None:
        self.path = Path(path)
        self.row_group_tokens = row_group_tokens
        meta = table_metadata("samples", tokenizer)
        meta[b"tito.policy"] = json.dumps(
            {"fork_threshold": policy.fork_threshold, "reward_mode": policy.reward_mode}, sort_keys=True
        ).encode()
        self.schema = SAMPLES_SCHEMA.with_metadata(meta)
        self._atomic = atomic_path(self.path)
        self._tmp = self._atomic.__enter__()
        # Token ids are nearly unique values: a dictionary is built and thrown away, so skip it.
        # Min/max statistics of the list columns (tokens, masks, logprobs) help no reader
        # and cost about a sixth of the write: keep them for the scalar columns only.
        scalar_columns = [f.name for f in SAMPLES_SCHEMA if not pa.types.is_list(f.type)]
        self._writer = pq.ParquetWriter(
            self._tmp,
            self.schema,
            compression="zstd",
            use_dictionary=["session_id", "label", "status"],
            write_statistics=scalar_columns,
        )
        self._tables: list[pa.Table] = []
        self._buffered_tokens = 0
        self.samples_written = 0

    def add(self, result: SessionResult) -> None:
        self.add_table(session_table(result))

    def add_table(self, table: pa.Table) -> None:
        """Buffer one session's rows (as made by :func:`session_table`)."""
        if table.num_rows == 0:
            return
        self._tables.append(table)
        tokens = table.column("tokens")
        self._buffered_tokens += sum(len(chunk.values) for chunk in tokens.chunks)
        if self._buffered_tokens >= self.row_group_tokens:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if not self._tables:
            return
        # Not combined into one chunk per column: the writer streams chunks into the same
        # pages (the bytes are the same either way), and combining copies every token once more.
        table = pa.concat_tables(self._tables).replace_schema_metadata(self.schema.metadata)
        self._writer.write_table(table)
        self.samples_written += table.num_rows
        self._tables = []
        self._buffered_tokens = 0

    def close(self) -> None:
        """Write what is buffered and move the file into place."""
        self._write_row_group()
        self._writer.close()
        self._atomic.__exit__(None, None, None)

    def abort(self) -> None:
        """Drop the temporary file; the target (and any previous output) is left untouched."""
        try:
            self._writer.close()
        finally:
            error = RuntimeError("aborted")
            # atomic_path removes its temporary file when an exception is thrown into it.
            with contextlib.suppress(RuntimeError):
                self._atomic.__exit__(RuntimeError, error, None)

    def __enter__(self) -> SamplesWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()
