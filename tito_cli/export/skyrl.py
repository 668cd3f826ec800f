"""``--to skyrl``: a pretokenized SFT dataset for SkyRL (``pretokenized_dataset_paths``).

One row per sample: ``input_ids`` (the sample's tokens, unpadded) and
``loss_mask`` over the *whole* sequence (SkyRL's full-sequence 0/1 mask, the
same length as ``input_ids``): 0 over the first prompt, then the sample's
loss mask.  Nothing else: SkyRL passes unknown columns on to its collator.
SFT only, so rewards and logprobs are not written.
"""

from __future__ import annotations

import pyarrow as pa

from .._arrow import list_array
from ._pretokenized import PretokenizedParquet, full_length_masks

__all__ = ["SkyRLDataset"]


class SkyRLDataset(PretokenizedParquet):
    name = "skyrl"
    summary = "SkyRL pretokenized SFT Parquet: input_ids and a full-length loss_mask"
    table_name = "skyrl"
    schema = pa.schema(
        [
            pa.field("input_ids", pa.list_(pa.int32()), nullable=False),
            pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),
        ]
    )

    def columns(self, samples: pa.Table) -> dict[str, pa.Array]:
        tokens, masks = full_length_masks(samples)
        return {"input_ids": list_array(tokens, pa.int32()), "loss_mask": list_array(masks, pa.int8())}
