"""Arrow schemas of the three tables tito reads and writes (SPEC §2, §5)."""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "FORMAT_VERSION",
    "FORMAT_VERSIONS",
    "META_FORMAT",
    "META_TABLE",
    "META_TOKENIZER",
    "PROVENANCE_FIELDS",
    "PROVENANCE_KEY",
    "REFERENCE_COLUMNS",
    "SAMPLES_SCHEMA",
    "SESSIONS_SCHEMA",
    "TURNS_SCHEMA",
    "TURNS_SCHEMA_V2",
    "samples_schema",
    "table_metadata",
]

#: Schema-metadata keys that say what a Parquet file holds.
META_TABLE = "tito.table"
META_FORMAT = "tito.format"
META_TOKENIZER = "tito.tokenizer"
#: The key of each sample's metadata that holds its provenance; a sessions row may not use it.
PROVENANCE_KEY = "tito"
#: The format a file is marked with unless said otherwise (samples and sessions tables).
FORMAT_VERSION = "1"
#: The turn-log formats this version reads (docs/spec.md §2, §9): ``2`` adds the reference columns.
FORMAT_VERSIONS = ("1", "2")

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

#: Format 2 (docs/spec.md §9): a turn may store only what is new since an earlier turn of its session.
REFERENCE_COLUMNS = ("base_seq", "shared_prompt_ids", "shared_messages")
TURNS_SCHEMA_V2 = pa.schema(
    [
        *TURNS_SCHEMA,
        pa.field("base_seq", pa.int64()),
        pa.field("shared_prompt_ids", pa.int64()),
        pa.field("shared_messages", pa.int64()),
    ]
)

#: The optional provenance columns of a turns table (docs/spec.md §2), in either format; a file
#: without any provenance has none of them.
PROVENANCE_FIELDS = (
    pa.field("weight_versions", pa.string()),
    pa.field("sampling", pa.string()),
    pa.field("call_kind", pa.string()),
    pa.field("routed_experts", pa.large_binary()),
    pa.field("routed_experts_start", pa.int64()),
    pa.field("routed_experts_layers", pa.int64()),
    pa.field("routed_experts_topk", pa.int64()),
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


#: ``rebuild --routed-experts``: each sample's routed experts, ``[len(tokens) - 1, layers, topk]`` int32
#: flattened, and that shape (docs/spec.md §5).
ROUTED_EXPERTS_FIELDS = (
    pa.field("routed_experts", pa.list_(pa.int32())),
    pa.field("routed_experts_shape", pa.list_(pa.int32())),
)


def samples_schema(routed_experts: bool = False) -> pa.Schema:
    """The samples table's schema: :data:`SAMPLES_SCHEMA`, and the routed-experts columns when asked for."""
    return pa.schema([*SAMPLES_SCHEMA, *ROUTED_EXPERTS_FIELDS]) if routed_experts else SAMPLES_SCHEMA


def table_metadata(table: str, tokenizer: str | None = None, *, format: str = FORMAT_VERSION) -> dict[bytes, bytes]:
    """Schema metadata that marks a file as a tito ``turns``/``sessions``/``samples`` table."""
    meta = {META_TABLE: table, META_FORMAT: format}
    if tokenizer:
        meta[META_TOKENIZER] = tokenizer
    return {k.encode(): v.encode() for k, v in meta.items()}
