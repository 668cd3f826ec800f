"""Arrow schemas of the three tables tito reads and writes (SPEC §2, §5)."""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "FORMAT_VERSION",
    "META_FORMAT",
    "META_TABLE",
    "META_TOKENIZER",
    "PROVENANCE_KEY",
    "SAMPLES_SCHEMA",
    "SESSIONS_SCHEMA",
    "TURNS_SCHEMA",
    "table_metadata",
]

#: Schema-metadata keys that say what a Parquet file holds.
META_TABLE = "tito.table"
META_FORMAT = "tito.format"
META_TOKENIZER = "tito.tokenizer"
#: The key of each sample's metadata that holds its provenance; a sessions row may not use it.
PROVENANCE_KEY = "tito"
FORMAT_VERSION = "1"

TURNS_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("prompt_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("output_ids", pa.list_(pa.int32()), nullable=False),
        pa.field("output_logprobs", pa.list_(pa.float32())),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("prompt_messages", pa.string(), nullable=False),
        pa.field("response_message", pa.string()),
        pa.field("tools", pa.string()),
        pa.field("metadata", pa.string()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("ill_formed", pa.bool_()),
    ]
)

SESSIONS_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("reward", pa.float64()),
        pa.field("index", pa.int64()),
        pa.field("group_index", pa.int64()),
        pa.field("label", pa.string()),
        pa.field("metadata", pa.string()),
        pa.field("rollout_id", pa.int64()),
    ]
)

SAMPLES_SCHEMA = pa.schema(
    [
        pa.field("session_id", pa.string(), nullable=False),
        pa.field("sample_index", pa.int32(), nullable=False),
        pa.field("tokens", pa.list_(pa.int32()), nullable=False),
        pa.field("response_length", pa.int32(), nullable=False),
        pa.field("loss_mask", pa.list_(pa.int8()), nullable=False),
        pa.field("rollout_log_probs", pa.list_(pa.float32()), nullable=False),
        pa.field("reward", pa.float64(), nullable=False),
        pa.field("index", pa.int64()),
        pa.field("group_index", pa.int64()),
        pa.field("rollout_id", pa.int64()),
        pa.field("label", pa.string()),
        pa.field("status", pa.string(), nullable=False),
        pa.field("metadata", pa.string(), nullable=False),
    ]
)


def table_metadata(table: str, tokenizer: str | None = None) -> dict[bytes, bytes]:
    """Schema metadata that marks a file as a tito ``turns``/``sessions``/``samples`` table."""
    meta = {META_TABLE: table, META_FORMAT: FORMAT_VERSION}
    if tokenizer:
        meta[META_TOKENIZER] = tokenizer
    return {k.encode(): v.encode() for k, v in meta.items()}
