"""The sink interface: where a run's finished sessions go, one format a module.

    table = session_table(result)        # one session's samples, SPEC §5 columns
    sink = open_sink("slime", out, context)   # export/formats.py: the table of formats
    sink.add(table) ...                  # sessions in session-id order
    staged = sink.close()                # everything written to temporaries, nothing published
    publish([*staged, rejects.close()])  # all the run's files appear together (tito_cli._atomic)

Both runners (``run/local.py``, ``run/ray_data.py``) and ``tito export``
hand a sink the same per-session tables.  A format is one module in this
package with a :class:`Sink` subclass carrying ``name`` (``--format``,
``--to``), ``summary`` and its own ``Options`` dataclass, and one line in
``export/formats.py``'s table.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from .._arrow import list_column, primitive_array, string_array
from .._atomic import StagedFile
from .._paths import check_output_target
from ..algorithm.linearize import LinearizedSample
from ..algorithm.policy import Policy, default_policy
from ..algorithm.session import SessionResult
from ..schema import PROVENANCE_KEY, SAMPLES_SCHEMA
from ..turns import SessionInfo

__all__ = [
    "NoOptions",
    "Sink",
    "SinkContext",
    "provenance",
    "rollout_id",
    "sample_metadata",
    "session_table",
    "token_count",
]


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
    return pa.table(columns, schema=SAMPLES_SCHEMA)


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


@dataclass(frozen=True, slots=True)
class NoOptions:
    """The options of a format that has none."""


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What a sink may need besides the tables: how they were made, and the user's choices.

    ``options`` is an instance of the sink's own ``Options`` dataclass (``None``: its defaults);
    ``open_sink`` (export/formats.py) checks it, so a sink reads its options from here typed.
    """

    policy: Policy = field(default_factory=default_policy)
    tokenizer: str | None = None
    options: Any = None
    overwrite: bool = False


class Sink(ABC):
    """Receives finished sessions' sample tables (in session-id order) and writes one format.

    Nothing appears at ``out`` until the caller publishes what :meth:`close`
    staged, together with the run's other files; :meth:`abort` drops every
    temporary and leaves previous outputs untouched.

    A format is a subclass carrying ``name`` (``--format``, ``--to``), a one-line
    ``summary`` and, when it has options, its own ``Options`` dataclass whose fields'
    ``metadata["help"]`` the command line shows (``--split-by`` is the field ``split_by``).
    """

    #: The format's name on the command line and in ``rebuild(output_format=...)``.
    name: ClassVar[str]
    #: One line for help texts and docs.
    summary: ClassVar[str]
    #: The format's options (a dataclass); a format without options keeps :class:`NoOptions`.
    Options: ClassVar[type[Any]] = NoOptions

    def __init__(self, out: Path, context: SinkContext) -> None:
        self.out = out
        self.context = context
        #: Samples written (after ``close``).
        self.samples_written = 0
        #: The files this sink wrote (after ``close``), in order.
        self.files: list[Path] = []
        #: Things the user should know about the written output (after ``close``).
        self.warnings: list[str] = []

    @abstractmethod
    def add(self, table: pa.Table) -> None:
        """One session's sample rows (``session_table``'s columns; possibly none)."""

    @abstractmethod
    def close(self) -> list[StagedFile]:
        """Write everything to temporaries beside the targets; publish nothing."""

    @abstractmethod
    def abort(self) -> None:
        """Drop every temporary; safe after a failed :meth:`close`."""

    def check_target(self, path: Path) -> None:
        """Refuse to replace an existing file without ``overwrite``, and anything but a regular file ever."""
        check_output_target(path, overwrite=self.context.overwrite)
