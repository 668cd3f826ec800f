"""``tito rebuild --engine ray``: the same per-session rebuild as a Ray Data pipeline.

    ray.data.read_parquet(turn files)        # the columns a rebuild reads, plus each row's file
      .groupby("session_id")
      .map_groups(_rebuild_group)            # parse_session → rebuild_session → session_table
      .write_parquet(OUT/)                   # one folder of Parquet files

For corpora beyond one machine: Ray reads, shuffles and writes in parallel
across a cluster (``ray.init`` joins the cluster named by ``RAY_ADDRESS``,
else starts a local one).  Each group's function is exactly what the local
engine runs per session, so the samples are the same; only their order
differs: Ray writes sessions in whatever order its groups finish, spread over
several files.  :func:`read_samples` reads the folder back in the local
engine's order (session id, then sample index).

Besides the samples, each group emits one bookkeeping row (``status`` =
``session`` or ``rejected``, details as JSON in ``metadata``) from which the
driver builds the summary and the rejects report; those rows are not
written to the samples folder.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .._arrow import list_array, primitive_array, string_array
from ..algorithm.policy import Policy
from ..algorithm.session import SessionReport, rebuild_session
from ..errors import InvalidSessionError, OutputError, TitoError
from ..export.parquet import session_table
from ..read.files import READ_COLUMNS
from ..read.rows import rows_from_table
from ..read.turnlog import TurnLog
from ..read.validate import parse_session
from ..schema import SAMPLES_SCHEMA
from ..turns import RowRef, SessionInfo
from .corpus import Reject
from .rebuild import RebuildSummary, rejects_path

__all__ = ["read_samples", "rebuild_ray"]

_PATH = "path"  # the column ray.data.read_parquet(include_paths=True) adds


def read_samples(folder: str | os.PathLike[str]) -> pa.Table:
    """A Ray-written samples folder as one table, in the local engine's order (session id, sample index)."""
    table = pq.read_table(folder)
    order = pc.sort_indices(table, sort_keys=[("session_id", "ascending"), ("sample_index", "ascending")])
    return table.take(order)


def rebuild_ray(
    inputs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    policy: Policy | None = None,
    *,
    overwrite: bool = False,
) -> RebuildSummary:
    """Rebuild every session under ``inputs`` into the folder ``out`` with Ray Data."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise TitoError(
            "the ray engine needs Ray Data, which is not installed",
            tip="pip install 'tito[ray]'  (or: pip install 'ray[data]')",
        ) from None
    policy = policy or Policy()
    out = Path(out)
    rejects_file = rejects_path(out)
    if out.exists():
        if not overwrite:
            raise OutputError("output exists", file=out, tip="pass --overwrite to replace it")
        if not out.is_dir():
            raise OutputError("the ray engine writes a folder, and this is a file", file=out)
    if not out.parent.is_dir():
        raise OutputError("the output's folder does not exist", file=out)

    # Indexed as it is classified (one open a file): the session ids below need the index.
    log = TurnLog.open([Path(p) for p in inputs], exclude=[out], index=True)
    sessions = log.read_sessions()
    summary = RebuildSummary(out=out, rejects_file=rejects_file, policy=policy, tokenizer=log.tokenizer)
    session_ids = log.session_ids()

    if not ray.is_initialized():
        ray.init(log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    # Group by sorting, with tasks: the default hash shuffle starts aggregator actors, which costs
    # seconds before the first row even for a small log.
    context.shuffle_strategy = "sort_shuffle_pull_based"

    # Columns every turns file has (optional ones missing somewhere are read as null).
    common = [c for c in READ_COLUMNS if all(c in f.columns for f in log.turn_files)]
    tmp = out.with_name(f".{out.name}.ray-tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    if log.turn_files:
        dataset = ray.data.read_parquet([str(f.path) for f in log.turn_files], columns=common, include_paths=True)
        rebuilt = (
            dataset.groupby("session_id", num_partitions=_partitions(log))
            .map_groups(
                _rebuild_group,  # type: ignore[arg-type, unused-ignore]  # extra arguments come from fn_kwargs
                batch_format="pyarrow",
                fn_kwargs={"infos": sessions.infos, "invalid": sessions.invalid, "policy": policy},
            )
            .materialize()
        )
        rebuilt.map_batches(_samples_only, batch_format="pyarrow").write_parquet(str(tmp))
        bookkeeping = rebuilt.map_batches(_bookkeeping_only, batch_format="pyarrow").take_all()
    else:
        tmp.mkdir()
        bookkeeping = []

    rejected: list[Reject] = []
    for row in sorted(bookkeeping, key=lambda r: r["session_id"]):
        detail = json.loads(row["metadata"])
        if row["status"] == "rejected":
            rejected.append(Reject(row["session_id"], detail["reason"], detail["file"], detail["row"]))
            continue
        summary.add_session(row["session_id"], SessionReport(**detail))

    # Move the finished folder into place (the old one goes only once the new one is complete).
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)

    summary.finish(session_ids, sessions, rejected)
    return summary


def _partitions(log: TurnLog) -> int:
    """Shuffle partitions: about one per 256 MiB of turn columns, at least one per CPU of the cluster.

    Ray's default (hundreds) makes a small log pay for hundreds of tasks.
    """
    import ray

    cpus = int(ray.cluster_resources().get("CPU", 1))  # type: ignore[no-untyped-call, unused-ignore]
    size = sum(f.path.stat().st_size for f in log.turn_files)
    return max(cpus, min(1000, size // (256 << 20) + 1))


def _samples_only(table: pa.Table) -> pa.Table:
    return table.filter(pc.equal(table.column("status"), "completed"))


def _bookkeeping_only(table: pa.Table) -> pa.Table:
    return table.filter(pc.not_equal(table.column("status"), "completed")).select(["session_id", "status", "metadata"])


def _rebuild_group(
    table: pa.Table,
    infos: dict[str, SessionInfo],
    invalid: dict[str, tuple[str, RowRef]],
    policy: Policy,
) -> pa.Table:
    """One session's rows (any order) → its sample rows plus one bookkeeping row."""
    sid = table.column("session_id")[0].as_py()
    if sid in invalid:
        reason, ref = invalid[sid]
        return _bookkeeping(sid, "rejected", {"reason": reason, "file": ref.file, "row": ref.row})
    # The local reader's order: seq (a null seq last), then file.
    order = pc.sort_indices(table, sort_keys=[("seq", "ascending"), (_PATH, "ascending")], null_placement="at_end")
    table = table.take(order)
    paths = table.column(_PATH).to_pylist()
    rows = table.drop_columns([_PATH])
    try:
        # Ray does not say which row of its file a row was: name rows by position for now,
        turns = parse_session(rows_from_table(sid, rows, [RowRef(path, -1) for path in paths]))
    except InvalidSessionError:
        # and look the file rows up only for a rejected session (rare), then validate again.
        sources = _file_rows(sid, paths, table.column("seq").to_pylist())
        try:
            parse_session(rows_from_table(sid, rows, sources))
        except InvalidSessionError as exc:
            return _bookkeeping(sid, "rejected", {"reason": exc.message, "file": exc.file, "row": exc.row})
        raise  # pragma: no cover - the same rows fail the same way
    result = rebuild_session(sid, turns, infos.get(sid), policy)
    report = asdict(result.report)
    samples = session_table(result)
    return pa.concat_tables([samples, _bookkeeping(sid, "session", report)])


def _file_rows(sid: str, paths: list[str], seqs: list[int | None]) -> list[RowRef]:
    """The file row of each of a session's rows (given in seq order, with their files and seqs)."""
    sources: list[RowRef] = [RowRef(path, -1) for path in paths]
    for path in sorted(set(paths)):
        columns = pq.read_table(path, columns=["session_id", "seq"]).to_pydict()
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
        "label": string_array([None]),
        "status": string_array([status]),
        "metadata": string_array([json.dumps(detail, ensure_ascii=False)]),
    }
    return pa.table(columns, schema=SAMPLES_SCHEMA)
