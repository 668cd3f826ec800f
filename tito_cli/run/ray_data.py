"""``tito rebuild --engine ray``: the same per-session step as a Ray Data pipeline, the same sink.

    ray.data.read_parquet(turn files)        # the columns a rebuild reads, plus each row's file
      .groupby("session_id")
      .map_groups(_rebuild_group)            # run/corpus.py's session_output, per session
      .sort(["session_id", "sample_index"])
      .iter_batches()  →  sink.add(...)      # in the driver, as the local runner does

For corpora beyond one machine: Ray reads, shuffles and rebuilds in
parallel across a cluster (``ray.init`` joins the cluster named by
``RAY_ADDRESS``, else starts a local one).  Each group runs exactly the
local runner's per-session step, and the sorted sessions stream to the
driver, which hands them to the same sink (``tito_cli/export/``), so the
written files are byte for byte the local runner's.

Besides the samples, each group emits one bookkeeping row (``status`` =
``session`` or ``rejected``, details as JSON in ``metadata``, sorted before
the session's samples by its ``sample_index`` of -1) from which the driver
builds the summary and the rejects report.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._arrow import list_array, primitive_array, string_array
from .._parquet import checked_scan_options, read_parquet_table
from ..algorithm.policy import Policy
from ..algorithm.session import SessionReport
from ..errors import ExportError, MissingDependencyError
from ..read.files import READ_COLUMNS, LogFile
from ..read.rows import rows_from_table
from ..read.sessions import SessionsTable
from ..read.turnlog import TurnLog
from ..schema import SAMPLES_SCHEMA
from ..turns import Reject, RowRef, SessionInfo
from .corpus import SessionFacts, SessionOutput, Unfinished, reject_unfinished, session_output
from .export import tables_by_session
from .rebuild import DriftCounter, RebuildOptions, RebuildSummary, rebuild_with
from .runner import Runner

__all__ = ["RayOptions", "RayRunner", "rebuild_ray"]

_PATH = "path"  # the column ray.data.read_parquet(include_paths=True) adds


@dataclass(frozen=True, slots=True)
class RayOptions:
    """The Ray runner's options."""

    quiet: bool = field(
        default=True, metadata={"help": "hide Ray's own INFO and WARNING lines (Ray keeps them in its session logs)"}
    )


class RayRunner(Runner):
    """A Ray Data pipeline: Ray reads, groups and rebuilds the sessions across a cluster."""

    name = "ray"
    summary = "a Ray Data pipeline across a cluster (pip install 'tito-cli[ray]')"
    Options = RayOptions
    options: RayOptions

    @contextlib.contextmanager
    def open(self, files: list[Path], unfinished: Unfinished, spill_dir: Path) -> Iterator[_RayLog]:
        ray = _import_ray(quiet=self.options.quiet)
        # Indexed as it is classified (one open a file): the session ids below need the index.
        log = TurnLog.open(files, index=True)
        sessions = log.read_sessions()
        if unfinished == "reject":
            reject_unfinished(sessions, log)
        yield _RayLog(ray, log, sessions)


def _import_ray(*, quiet: bool) -> Any:
    try:
        import ray
        import ray.data
    except ImportError:
        raise MissingDependencyError(
            "the ray engine needs Ray Data, which is not installed",
            tip="pip install 'tito-cli[ray]'  (or: pip install 'ray[data]' aiohttp)",
        ) from None
    if quiet:
        # After importing ray.data, which sets its loggers up (levels included) at import.
        for name in ("ray", "ray.data"):
            logging.getLogger(name).setLevel(logging.ERROR)
    return ray


@dataclass(slots=True)
class _RayLog:
    ray: Any
    log: TurnLog
    sessions_table: SessionsTable
    workers_capped: tuple[int, int] | None = None

    @property
    def tokenizer(self) -> str | None:
        return self.log.tokenizer

    @property
    def log_files(self) -> list[LogFile]:
        return self.log.files

    def session_ids(self) -> Sequence[str]:
        return self.log.session_ids()

    def outputs(self, policy: Policy, count_drift: SessionFacts | None) -> Iterator[SessionOutput | Reject]:
        if policy.routed_experts:
            raise ExportError("--routed-experts runs with the local runner only (not with the Ray runner yet)")
        table = self.sessions_table
        for rows in _rebuilt_sessions(self.ray, self.log, table.infos, table.invalid, policy, count_drift):
            sid = rows.column("session_id")[0].as_py()
            status = rows.column("status")[0].as_py()
            detail = json.loads(rows.column("metadata")[0].as_py())
            if status == "rejected":
                yield Reject(sid, detail["reason"], detail["file"], detail["row"])
                continue
            # The samples as the local runner makes them (Ray's blocks keep the types, not the
            # schema's non-null flags).
            samples = rows.slice(1)
            yield SessionOutput(
                sid, pa.Table.from_arrays(samples.columns, schema=SAMPLES_SCHEMA), SessionReport(**detail)
            )


def rebuild_ray(
    inputs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    policy: Policy | None = None,
    *,
    overwrite: bool = False,
    output_format: str = "parquet",
    options: object = None,
    unfinished: Unfinished = "keep",
    quiet: bool = True,
    drift_counter: DriftCounter | None = None,
) -> RebuildSummary:
    """:func:`~tito_cli.run.rebuild.rebuild` with the Ray runner (the same files, the same summary).

    ``quiet``: Ray's own INFO and WARNING log lines (execution plans, timings) are not
    shown; Ray keeps them in its session logs.  Errors still show.
    """
    run = RebuildOptions(
        overwrite=overwrite,
        output_format=output_format,
        options=options,
        unfinished=unfinished,
        drift_counter=drift_counter,
        engine="ray",
        engine_options=RayOptions(quiet=quiet),
    )
    return rebuild_with(inputs, out, policy, run)


def _rebuilt_sessions(
    ray: Any,
    log: TurnLog,
    infos: Mapping[str, SessionInfo],
    invalid: dict[str, tuple[str, RowRef]],
    policy: Policy,
    count_drift: SessionFacts | None = None,
) -> Iterator[pa.Table]:
    """Each session's bookkeeping row and sample rows, one table a session, in session-id order."""
    if not log.turn_files:
        return
    if not ray.is_initialized():
        ray.init(log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    # Group by sorting, with tasks: the default hash shuffle starts aggregator actors, which costs
    # seconds before the first row even for a small log.
    context.shuffle_strategy = "sort_shuffle_pull_based"

    columns, schema = _read_schema(log)
    dataset = ray.data.read_parquet(
        [str(f.path) for f in log.turn_files],
        columns=columns,
        include_paths=True,
        schema=schema,
        fragment_scan_options=checked_scan_options(),  # every page checked against its checksum
    )
    rebuilt = (
        dataset.groupby("session_id", num_partitions=_partitions(log))
        .map_groups(
            _rebuild_group,
            batch_format="pyarrow",
            fn_kwargs={"infos": infos, "invalid": invalid, "policy": policy, "count_drift": count_drift},
        )
        .sort(["session_id", "sample_index"])
    )
    yield from tables_by_session(rebuilt.iter_batches(batch_format="pyarrow", batch_size=None))


def _read_schema(log: TurnLog) -> tuple[list[str], pa.Schema | None]:
    """The columns to read, and a schema when an optional one is missing from some files.

    Without a schema Ray reads only the columns of its first file; with one,
    a file without an optional column (``tools``, ``ill_formed``, ...) reads
    it as null, as the local reader does.  Each column's type is the first
    file's that has it.
    """
    columns = [c for c in READ_COLUMNS if any(c in f.columns for f in log.turn_files)]
    if all(c in f.columns for f in log.turn_files for c in columns):
        return columns, None
    fields = {}
    for f in log.turn_files:
        missing = [c for c in columns if c in f.columns and c not in fields]
        if missing:
            file_schema = pq.read_schema(f.path)
            fields.update({c: file_schema.field(c) for c in missing})
    return columns, pa.schema([fields[c] for c in columns])


def _partitions(log: TurnLog) -> int:
    """Shuffle partitions: about one per 256 MiB of turn columns, at least one per CPU of the cluster.

    Ray's default (hundreds) makes a small log pay for hundreds of tasks.
    """
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call, unused-ignore]
    size = sum(f.path.stat().st_size for f in log.turn_files)
    return max(cpus, min(1000, size // (256 << 20) + 1))


def _rebuild_group(
    table: pa.Table,
    infos: Mapping[str, SessionInfo],
    invalid: dict[str, tuple[str, RowRef]],
    policy: Policy,
    count_drift: SessionFacts | None = None,
) -> pa.Table:
    """One session's rows (any order) → its bookkeeping row plus its sample rows."""
    sid = table.column("session_id")[0].as_py()
    # The local reader's order: seq (a null seq last), then file.
    order = pc.sort_indices(table, sort_keys=[("seq", "ascending"), (_PATH, "ascending")], null_placement="at_end")
    table = table.take(order)
    paths = table.column(_PATH).to_pylist()
    rows = table.drop_columns([_PATH])
    # Ray does not say which row of its file a row was: name rows by position for now,
    first_try = rows_from_table(sid, rows, [RowRef(path, -1) for path in paths])
    output = session_output(first_try, infos, invalid, policy, count_drift)
    if isinstance(output, Reject) and sid not in invalid:
        # and look the file rows up only for a rejected session (rare), then rebuild again.
        sources = _file_rows(sid, paths, table.column("seq").to_pylist())
        output = session_output(rows_from_table(sid, rows, sources), infos, invalid, policy, count_drift)
    if isinstance(output, Reject):
        return _bookkeeping(sid, "rejected", {"reason": output.reason, "file": output.file, "row": output.row})
    assert output.table is not None
    return pa.concat_tables([_bookkeeping(sid, "session", asdict(output.report)), output.table])


def _file_rows(sid: str, paths: list[str], seqs: list[int | None]) -> list[RowRef]:
    """The file row of each of a session's rows (given in seq order, with their files and seqs)."""
    sources: list[RowRef] = [RowRef(path, -1) for path in paths]
    for path in sorted(set(paths)):
        columns = read_parquet_table(path, columns=["session_id", "seq"]).to_pydict()
        # This session's rows in the file, in the group's order: seq (null last), then file row.
        in_file = sorted(
            (q is None, q or 0, row)
            for row, (s, q) in enumerate(zip(columns["session_id"], columns["seq"], strict=False))
            if s == sid
        )
        positions = [i for i, p in enumerate(paths) if p == path]
        for position, (_, _, row) in zip(positions, in_file, strict=False):
            sources[position] = RowRef(path, row)
    return sources


def _bookkeeping(sid: str, status: str, detail: dict[str, Any]) -> pa.Table:
    columns = {
        "session_id": string_array([sid]),
        "sample_index": primitive_array(np.array([-1], dtype=np.int32), pa.int32()),
        "tokens": list_array([np.zeros(0, np.int32)], pa.int32()),
        "response_length": primitive_array(np.array([0], dtype=np.int32), pa.int32()),
        "loss_mask": list_array([np.zeros(0, np.int8)], pa.int8()),
        "rollout_log_probs": list_array([np.zeros(0, np.float32)], pa.float32()),
        "reward": primitive_array(np.array([0.0]), pa.float64()),
        "index": primitive_array([None], pa.int64()),
        "group_index": primitive_array([None], pa.int64()),
        "rollout_id": primitive_array([None], pa.int64()),
        "label": string_array([None]),
        "status": string_array([status]),
        "metadata": string_array([json.dumps(detail, ensure_ascii=False)]),
    }
    return pa.table(columns, schema=SAMPLES_SCHEMA)
