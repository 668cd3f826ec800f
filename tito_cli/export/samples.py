"""The samples table (docs/spec.md §5): one session's samples as the rows every sink receives.

What workers send back and sinks write: plain Arrow columns, no routing
tree, no turns; the metadata column carries the session's metadata, the
policy's flags and each sample's provenance under ``"tito"``.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa

from .._arrow import list_column, primitive_array, string_array
from ..algorithm.linearize import LinearizedSample
from ..algorithm.provenance import sample_versions
from ..algorithm.session import SessionResult
from ..schema import PROVENANCE_KEY, samples_schema
from ..turns import SessionInfo

__all__ = ["provenance", "rollout_id", "sample_metadata", "session_table", "token_count"]


def provenance(sample: LinearizedSample) -> dict[str, Any]:
    """Where a sample came from: leaf, segment, the turns packed and those trained, the fork."""
    return {
        "leaf": sample.leaf,
        "segment": sample.segment,
        "turns": list(sample.seqs),
        "trained_turns": list(sample.trained_seqs),
        "fork": sample.fork.value if sample.fork is not None else None,
    }


# Built once: json.dumps with options builds a new encoder per call (one per sample here).
_METADATA_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def sample_metadata(result: SessionResult, sample: LinearizedSample) -> str:
    """The session's metadata, the policy's flags (docs/spec.md §8.6) and provenance under ``"tito"``, as
    deterministic, strict JSON.

    A sessions row whose metadata has its own ``"tito"`` key, or anything
    that is not strict JSON, was rejected when the sessions table was read.
    ``finished`` is false for a session rebuilt without a sessions row: its reward of 0.0 is
    not the environment's verdict (the harness died), and a trainer may want to leave it out.
    """
    meta = dict(result.info.metadata or {})
    if sample.flags is not None:
        meta.update(sample.flags)
    meta[PROVENANCE_KEY] = {**provenance(sample), "finished": result.info.finished}
    versions = sample_versions(sample)
    if versions is not None:
        # Only a sample of turns that recorded weight versions names them (the others read as before).
        meta[PROVENANCE_KEY]["weight_versions"], meta[PROVENANCE_KEY]["weight_version_spans"] = versions
    return _METADATA_JSON.encode(meta)


def rollout_id(info: SessionInfo) -> int | None:
    """slime's ``rollout_id`` of a session's samples: the sessions row's, else its ``index`` (docs/spec.md §8.8)."""
    return info.rollout_id if info.rollout_id is not None else info.index


def session_table(result: SessionResult) -> pa.Table:
    """One session's samples as rows of the samples table (SPEC §5), in emission order.

    This is the unit every sink receives, and what workers send back:
    plain Arrow columns, no routing tree, no turns.
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
        "rollout_id": primitive_array([rollout_id(info)] * n, pa.int64()),
        "label": string_array([info.label] * n),
        "status": string_array(["completed"] * n),
        "metadata": string_array([sample_metadata(result, s) for s in samples]),
    }
    if result.policy.routed_experts:
        # rebuild --routed-experts: every sample kept has its rows (the others were rejected).
        experts = [s.routed_experts for s in samples]
        assert all(e is not None for e in experts)
        columns["routed_experts"] = list_column([e.reshape(-1) for e in experts if e is not None], pa.int32())
        columns["routed_experts_shape"] = list_column(
            [np.array(e.shape, dtype=np.int32) for e in experts if e is not None], pa.int32()
        )
    return pa.table(columns, schema=samples_schema(result.policy.routed_experts))


def token_count(table: pa.Table) -> int:
    """The tokens of a samples table, by its list offsets (right for slices, whose values are the parent's).

    Not ``ListArray.flatten``: that loads pyarrow.compute, which a rebuild does not otherwise need.
    """
    total = 0
    for chunk in table.column("tokens").chunks:
        if len(chunk):
            offsets = chunk.offsets
            total += offsets[len(chunk)].as_py() - offsets[0].as_py()
    return total
