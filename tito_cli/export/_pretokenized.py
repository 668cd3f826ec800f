"""What the SFT formats share: a Parquet file of pretokenized rows, one per sample, streamed by row group.

``skyrl.py`` and ``trl.py`` say which columns a sample becomes; this writes
them.  Row ``i`` of the file is sample ``i`` of the samples, in the same
order (sessions in session-id order, samples in emission order).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ..schema import table_metadata
from .base import SinkContext
from .parquet import StreamedParquetFile

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


class PretokenizedParquet(StreamedParquetFile):
    """A Parquet file whose columns ``columns`` makes from the samples, staged until published."""

    schema: pa.Schema
    table_name: str

    def __init__(
        self, out: Path, context: SinkContext, *, row_group_tokens: int = 2 << 20, row_group_sessions: int = 1024
    ) -> None:
        schema = self.schema.with_metadata(table_metadata(self.table_name, context.tokenizer))
        # Cut by sessions too, as the samples file is: by tokens alone, a log of many tiny
        # sessions was buffered whole (a small Arrow table per session).
        super().__init__(
            out,
            context,
            schema,
            row_group_tokens=row_group_tokens,
            row_group_sessions=row_group_sessions,
            use_dictionary=False,
        )

    def columns(self, samples: pa.Table) -> dict[str, pa.Array]:
        """The format's columns for these samples (one row each)."""
        raise NotImplementedError

    def _row_group_table(self, samples: pa.Table) -> pa.Table:
        return pa.table(self.columns(samples), schema=self.schema)
