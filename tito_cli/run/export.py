"""``export``: a samples file in, a trainer's format out (``tito export``), through the same sinks as ``rebuild``.

The samples file is read one row group at a time and cut into sessions
(a session's rows are contiguous in a samples file), which go to the sink
as ``rebuild`` hands them over, so ``tito export samples.parquet --to X``
and ``tito rebuild LOGS --format X`` write the same files.
"""

from __future__ import annotations

import json
import os
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .._parquet import open_parquet_file
from ..algorithm.policy import DEFAULT_POLICY, Policy, default_policy
from ..errors import SchemaError, UnreadableLogError
from ..export.base import SinkContext
from ..export.formats import format_options
from ..export.groups import GroupCounts, RolloutIds
from ..read.samples import check_sample_values
from ..schema import META_TABLE, META_TOKENIZER, SAMPLES_SCHEMA
from .output import RunOutput

__all__ = ["ExportSummary", "export_samples", "tables_by_session"]


@dataclass(slots=True)
class ExportSummary:
    source: Path
    format: str
    files: list[Path] = field(default_factory=list)
    sessions: int = 0
    samples_read: int = 0
    samples_written: int = 0
    groups: GroupCounts = field(default_factory=GroupCounts)
    warnings: list[str] = field(default_factory=list)
    #: What the format does not hold (its sink's ``leaves_out``).
    leaves_out: str = ""
    #: Each sample's length in tokens, in file order.
    lengths: array[int] = field(default_factory=lambda: array("q"))
    #: slime's rollout id of each session, checked (missing, shared).
    rollout_ids: RolloutIds = field(default_factory=RolloutIds)

    def length_quantiles(self) -> dict[str, int]:
        """Sample lengths (tokens): min, median, p90, p99 and max; empty without samples."""
        if not self.lengths:
            return {}
        values = np.sort(np.frombuffer(self.lengths, dtype=np.int64))
        pick = {"min": 0.0, "median": 0.5, "p90": 0.9, "p99": 0.99, "max": 1.0}
        return {name: int(values[round(q * (len(values) - 1))]) for name, q in pick.items()}


def tables_by_session(tables: Iterable[pa.Table]) -> Iterator[pa.Table]:
    """Cut a stream of tables whose rows are grouped by ``session_id`` into one table per session."""
    pending: list[pa.Table] = []
    current: str | None = None
    for table in tables:
        ids = table.column("session_id").to_pylist()
        start = 0
        for end in range(1, len(ids) + 1):
            if end < len(ids) and ids[end] == ids[start]:
                continue
            if ids[start] != current and pending:
                yield pa.concat_tables(pending)
                pending = []
            current = ids[start]
            pending.append(table.slice(start, end - start))
            start = end
    if pending:
        yield pa.concat_tables(pending)


def _policy_of(meta: dict[bytes, bytes]) -> Policy:
    """The policy a samples file was rebuilt with (its ``tito.policy`` metadata), as far as a sink needs it."""
    try:
        described = json.loads(meta.get(b"tito.policy", b"{}"))
        # Files of earlier versions record the knobs only: theirs was the default policy.
        knobs = {k: described[k] for k in ("fork_threshold", "reward_mode", "max_sample_tokens") if k in described}
        return Policy.named(described.get("name", DEFAULT_POLICY), **knobs)
    except (ValueError, TypeError, AttributeError):
        return default_policy()


def open_samples(path: Path) -> pq.ParquetFile:
    """A samples file (SPEC §5), checked: a tito samples table with the columns a sink reads."""
    try:
        file = open_parquet_file(path)
    except FileNotFoundError:
        raise UnreadableLogError("no such file", file=path) from None
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"not a readable Parquet file ({exc})", file=path) from None
    schema = file.schema_arrow
    kind = (schema.metadata or {}).get(META_TABLE.encode())
    if kind is not None and kind != b"samples":
        raise SchemaError(f"this is a tito {kind.decode()} table, not a samples file", file=path)
    for wanted in SAMPLES_SCHEMA:
        if wanted.name not in schema.names:
            raise SchemaError(f"not a samples file: no {wanted.name!r} column", file=path)
        if schema.field(wanted.name).type != wanted.type:
            raise SchemaError(
                f"column {wanted.name!r} is {schema.field(wanted.name).type}, expected {wanted.type}", file=path
            )
    return file


def _row_groups(path: Path, file: pq.ParquetFile, columns: list[str]) -> Iterator[pa.Table]:
    """The samples file's row groups; a read failure is the input's (exit 4), not the output's."""
    for i in range(file.num_row_groups):
        try:
            yield file.read_row_group(i, columns=columns)
        except (OSError, pa.ArrowException) as exc:
            raise UnreadableLogError(f"cannot read row group {i} ({exc})", file=path) from None


def _rollout_id(table: pa.Table) -> int | None:
    """A session's slime ``rollout_id`` (its samples share it): the column's when present and set, else ``index``."""
    if "rollout_id" in table.column_names:
        value = table.column("rollout_id")[0].as_py()
        if value is not None:
            return int(value)
    index = table.column("index")[0].as_py()
    return None if index is None else int(index)


def export_samples(
    samples: str | os.PathLike[str],
    out: str | os.PathLike[str],
    format: str,
    options: object = None,
    *,
    overwrite: bool = False,
) -> ExportSummary:
    """Write the samples file ``samples`` as ``format`` (an output format, export/formats.py) to ``out``.

    ``options``: the format's ``Options`` instance or a mapping of its fields.

    Memory stays bounded by a row group of the input (and, for ``slime``,
    one dump); the output appears atomically, all its files together, through the rebuild's
    own output handling (run/output.py: targets checked first, a killed run's temporaries swept).
    """
    source, out = Path(samples), Path(out)
    options = format_options(format, options)
    output = RunOutput(out, overwrite=overwrite, reads=[source], pattern=getattr(options, "out_pattern", None))
    file = open_samples(source)
    meta = file.schema_arrow.metadata or {}
    tokenizer = meta.get(META_TOKENIZER.encode())
    context = SinkContext(_policy_of(meta), tokenizer.decode() if tokenizer else None, options, overwrite)
    summary = ExportSummary(source=source, format=format)
    output.sweep()
    sink = output.open_sink(format, context)
    try:
        wanted = (*SAMPLES_SCHEMA.names, "rollout_id", "routed_experts", "routed_experts_shape")
        columns = [c for c in wanted if c in file.schema_arrow.names]
        for table in tables_by_session(_row_groups(source, file, columns)):
            summary.lengths.extend(check_sample_values(table, source, summary.samples_read).tolist())
            summary.sessions += 1
            summary.samples_read += table.num_rows
            sid, group_index = table.column("session_id")[0].as_py(), table.column("group_index")[0].as_py()
            summary.groups.add(sid, group_index, table.num_rows)
            summary.rollout_ids.add(sid, _rollout_id(table))
            output.add(sink, table)
    except BaseException:
        sink.abort()
        raise
    output.publish(sink)
    summary.files = list(sink.files)
    summary.samples_written = sink.samples_written
    summary.warnings = list(sink.warnings)
    summary.leaves_out = sink.leaves_out
    return summary
