"""The sink interface: where a run's finished sessions go, one format a module.

    table = session_table(result)        # one session's samples, SPEC §5 columns
    sink = open_sink("slime", out, context)
    sink.add(table) ...                  # sessions in session-id order
    staged = sink.close()                # everything written to temporaries, nothing published
    publish([*staged, rejects.close()])  # all the run's files appear together (tito_cli._atomic)

Both runners (``run/local.py``, ``run/ray_data.py``) and ``tito export``
hand a sink the same per-session tables.  A format is one module in this
package that defines ``SINK``, a :class:`Sink` subclass; the module's name
is the format's name on the command line (``--format``, ``--to``).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from .._arrow import list_column, primitive_array, string_array
from .._atomic import StagedFile
from .._targets import check_target
from ..algorithm.linearize import LinearizedSample
from ..algorithm.policy import Policy, default_policy
from ..algorithm.session import SessionResult
from ..errors import ExportError
from ..schema import PROVENANCE_KEY, SAMPLES_SCHEMA
from ..turns import SessionInfo

__all__ = [
    "ExportOptions",
    "Sink",
    "SinkContext",
    "format_names",
    "open_sink",
    "provenance",
    "rollout_id",
    "sample_metadata",
    "session_table",
    "token_count",
]

#: What ``--to slime`` does with a session that forked into several samples (docs/export.md).
ForkedChoice = Literal["keep", "leaf", "regroup"]
#: What ``--to slime`` does with rollout logprobs (slime uses them for all samples or none).
LogprobsChoice = Literal["auto", "keep", "drop"]


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
class ExportOptions:
    """The format options; each sink reads those of its format (see docs/export.md)."""

    #: slime: one file per this many groups (``--out`` then holds ``{rollout_id}``).
    split_by: int | None = None
    #: slime: a session that forked into several samples.
    forked: ForkedChoice = "keep"
    #: slime: rollout logprobs.
    logprobs: LogprobsChoice = "auto"
    #: trl: also write ``labels`` (-100 where masked).
    labels: bool = False

    @property
    def out_pattern(self) -> str | None:
        """The placeholder ``--out`` holds, one file per value (slime's ``--split-by``), if any."""
        return "{rollout_id}" if self.split_by is not None else None


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What a sink may need besides the tables: how they were made, and the user's choices."""

    policy: Policy = field(default_factory=default_policy)
    tokenizer: str | None = None
    options: ExportOptions = field(default_factory=ExportOptions)
    overwrite: bool = False


class Sink(ABC):
    """Receives finished sessions' sample tables (in session-id order) and writes one format.

    Nothing appears at ``out`` until the caller publishes what :meth:`close`
    staged, together with the run's other files; :meth:`abort` drops every
    temporary and leaves previous outputs untouched.
    """

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
        check_target(path, overwrite=self.context.overwrite)


#: A format module's sink, as it is written at the top level of the module.
_DEFINES_SINK = re.compile(r"^SINK\s*(:[^=]*)?=", re.MULTILINE)


def format_names() -> list[str]:
    """The output formats: the public modules of this package that define ``SINK``.

    Found by reading the modules' text, not by importing them: the command
    line lists the formats at start-up, and a format's imports (pyarrow's
    Parquet writer, torch) are paid only by the run that writes it.  Other
    modules here (the rejects report, group counts, the turn-log exporter of
    ``tito export-exchanges``) are not sample sinks.
    """
    folder = Path(__file__).parent
    names = []
    for module in pkgutil.iter_modules([str(folder)]):
        if module.name.startswith("_") or module.ispkg:
            continue
        if _DEFINES_SINK.search((folder / f"{module.name}.py").read_text(encoding="utf-8")):
            names.append(module.name)
    return sorted(names)


def open_sink(name: str, out: Path, context: SinkContext) -> Sink:
    """The sink of format ``name`` (a module of this package), writing ``out``."""
    if name not in format_names():
        raise ExportError(f"unknown output format {name!r}", tip=f"one of: {', '.join(format_names())}")
    module = importlib.import_module(f"{__package__}.{name}")
    sink_class: type[Sink] = module.SINK
    return sink_class(out, context)
