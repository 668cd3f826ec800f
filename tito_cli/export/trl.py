"""``--to trl``: a pretokenized dataset for Hugging Face TRL's ``SFTTrainer``.

One row per sample: ``input_ids`` (unpadded) and ``assistant_masks`` over the
whole sequence (1 on trained tokens, 0 over the first prompt and every
other context token).  TRL treats a dataset with ``input_ids`` as
pretokenized and applies ``assistant_masks`` whenever it is present; a
``completion_mask`` would apply only with ``completion_only_loss=True``, so
it is not what tito writes.  With ``labels`` (``--labels``), a third column
holds the token where trained and -100 elsewhere, which TRL's collator uses
as it is.  SFT only: rewards and logprobs are not written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from .._arrow import list_array
from .._atomic import StagedFile
from ._pretokenized import PretokenizedParquet, full_length_masks
from .base import SinkContext

__all__ = ["IGNORE_INDEX", "TRLDataset", "TRLOptions"]

#: The label PyTorch's cross-entropy (and TRL) ignores.
IGNORE_INDEX = -100
#: ``SFTConfig.max_length``'s default: TRL cuts longer sequences to it (keeping the start) while preparing the dataset.
TRL_DEFAULT_MAX_LENGTH = 1024


@dataclass(frozen=True, slots=True)
class TRLOptions:
    """``--to trl``'s options."""

    labels: bool = field(
        default=False, metadata={"help": "also write a 'labels' column (the token where trained, -100 elsewhere)."}
    )


class TRLDataset(PretokenizedParquet):
    name = "trl"
    summary = "TRL pretokenized SFT Parquet: input_ids, assistant_masks (and labels)"
    leaves_out = "rewards and logprobs (SFT: TRL trains on the masked tokens; --to slime keeps both)"
    Options = TRLOptions
    table_name = "trl"

    def __init__(self, out: Path, context: SinkContext) -> None:
        fields = [
            pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
            pa.field("assistant_masks", pa.list_(pa.int8()), nullable=False),
        ]
        options: TRLOptions = context.options or TRLOptions()
        self.labels = options.labels
        if self.labels:
            fields.append(pa.field("labels", pa.list_(pa.int64()), nullable=False))
        self.schema = pa.schema(fields)
        super().__init__(out, context)
        self._longest = 0
        self._over_default = 0
        self._trained = 0
        self._trained_cut = 0

    def columns(self, samples: pa.Table) -> dict[str, pa.Array]:
        tokens, masks = full_length_masks(samples)
        for mask in masks:
            self._longest = max(self._longest, len(mask))
            self._trained += int(mask.sum())
            if len(mask) > TRL_DEFAULT_MAX_LENGTH:
                self._over_default += 1
                self._trained_cut += int(mask[TRL_DEFAULT_MAX_LENGTH:].sum())
        columns = {"input_ids": list_array(tokens, pa.int32()), "assistant_masks": list_array(masks, pa.int8())}
        if self.labels:
            labels = [np.where(m == 1, t.astype(np.int64), IGNORE_INDEX) for t, m in zip(tokens, masks, strict=True)]
            columns["labels"] = list_array(labels, pa.int64())
        return columns

    def close(self) -> list[StagedFile]:
        staged = super().close()
        if self._over_default:
            share = self._trained_cut / self._trained if self._trained else 0.0
            self.warnings.append(
                f"{self._over_default:,} of {self.samples_written:,} samples are longer than TRL's default "
                f"max_length={TRL_DEFAULT_MAX_LENGTH}: TRL would cut them while preparing the dataset, losing "
                f"{self._trained_cut:,} of {self._trained:,} trained tokens ({share:.0%}); set "
                f"SFTConfig(max_length={self._longest}) (the longest sample) or max_length=None"
            )
        return staged


SINK = TRLDataset
