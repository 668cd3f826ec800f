"""What the SFT formats share: a Parquet file of pretokenized rows, one per sample, streamed by row group.

``skyrl.py`` and ``trl.py`` say which columns a sample becomes; this writes
them.  Row ``i`` of the file is sample ``i`` of the samples, in the same
order (sessions in session-id order, samples in emission order).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._atomic import StagedFile
from ..errors import OutputError
from ..schema import table_metadata
from .base import Sink, SinkContext, token_count

__all__ = ["PretokenizedParquet", "full_length_masks"]


def full_length_masks(table: pa.Table) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each sample's tokens and its loss mask over the whole sequence (0 over the first prompt)."""
    tokens_column = table.column("tokens").combine_chunks()
    masks_column = table.column("loss_mask").combine_chunks()
    lengths = table.column("response_length").to_numpy()
    tokens, masks = [], []
    for i in range(table.num_rows):
        ids = tokens_column[i].values.to_numpy(zero_copy_only=False)
        response = masks_column[i].values.to_numpy(zero_copy_only=False)
        full = np.zeros(len(ids), dtype=np.int8)
        full[len(ids) - int(lengths[i]) :] = response
        tokens.append(ids)
        masks.append(full)
    return tokens, masks


class PretokenizedParquet(Sink):
    """A Parquet file whose columns ``columns`` makes from the samples, staged until published."""

    schema: pa.Schema
    table_name: str

    def __init__(self, out: Path, context: SinkContext, *, row_group_tokens: int = 2 << 20) -> None:
        super().__init__(out, context)
        self.check_target(out)
        self.row_group_tokens = row_group_tokens
        self.schema = self.schema.with_metadata(table_metadata(self.table_name, context.tokenizer))
        try:
            self._staged = StagedFile(out)
        except OSError as exc:
            raise OutputError(f"cannot write ({exc})", file=out) from None
        self._writer = pq.ParquetWriter(self._staged.path, self.schema, compression="zstd", use_dictionary=False)
        self._tables: list[pa.Table] = []
        self._buffered_tokens = 0

    def columns(self, samples: pa.Table) -> dict[str, pa.Array]:
        """The format's columns for these samples (one row each)."""
        raise NotImplementedError

    def add(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._tables.append(table)
        self._buffered_tokens += token_count(table)
        if self._buffered_tokens >= self.row_group_tokens:
            self._write_row_group()

    def _write_row_group(self) -> None:
        if not self._tables:
            return
        samples = pa.concat_tables(self._tables)
        self._writer.write_table(pa.table(self.columns(samples), schema=self.schema))
        self.samples_written += samples.num_rows
        self._tables = []
        self._buffered_tokens = 0

    def close(self) -> list[StagedFile]:
        self._write_row_group()
        self._writer.close()
        self.files = [self.out]
        return [self._staged]

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._writer.close()
        self._staged.discard()
