"""``tito compact``: a turn log rewritten in format 2 (docs/spec.md §9), or back to format 1.

Valid sessions are read, reconstructed and recorded again through the capture
writer (``seq``, timestamps and ``ill_formed`` kept), one session at a time in log order, so
memory follows the session, not the log.  Sessions tables are copied as they
are.  The rows of an invalid session are copied unchanged from their files
(whatever their types), so that rebuilding the converted log rejects the same
sessions for the same reasons.  The new log is written into a fresh hidden folder
beside ``out`` and its files moved into place when complete
(:func:`tito_cli._targets.publish_folder`): the old log's files are replaced,
anything else in ``out`` stays.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._parquet import open_parquet_file, parquet_writer
from .._targets import check_target, log_files_in, publish_folder, staging_folder, writing
from ..algorithm.provenance import turn_experts
from ..capture.row_groups import ROW_GROUP_BYTES
from ..capture.writer import TurnLogWriter
from ..errors import InvalidSessionError, OutputError, UnreadableLogError
from ..read.files import LogFile, check_sessions_given, discover_files
from ..read.rows import read_batch
from ..read.turnlog import TurnLog
from ..read.validate import parse_session
from ..turns import Reject, Turn

__all__ = ["CompactSummary", "compact"]

#: Decoded turn columns read at a time (sessions are read in log-order batches of about this size).
BATCH_BYTES = 256 << 20


@dataclass(slots=True)
class CompactSummary:
    out: Path
    format: int
    sessions: int = 0
    turns: int = 0
    #: Invalid sessions, copied unchanged (their rows, in the files ``carried_files``).
    carried: list[Reject] = field(default_factory=list)
    files_written: list[Path] = field(default_factory=list)
    bytes_in: int = 0
    bytes_out: int = 0


def compact(
    inputs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    format: int = 2,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
    row_group_bytes: int = ROW_GROUP_BYTES,
) -> CompactSummary:
    """Rewrite the turn log ``inputs`` as a log in ``format`` (1 or 2) in the folder ``out``.

    ``row_group_bytes``: the bound on the new files' row groups (decoded cells; see
    :class:`~tito_cli.capture.writer.TurnLogWriter`).
    """
    if format not in (1, 2):
        raise ValueError(f"format must be 1 or 2, not {format!r}")
    out = Path(out)
    paths = [Path(p) for p in inputs]
    # Never the folder read nor one inside it (or holding it), never a file or a symbolic link.
    check_target(out, overwrite=overwrite, reads=paths, found=discover_files(paths), folder=True)
    replaced = log_files_in(out) if out.is_dir() else []
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise OutputError("output exists", file=out, tip="pass --overwrite to replace the log in it")
    log = TurnLog.open(paths, index=True)
    check_sessions_given(paths, log.files)
    # A fresh name per run: two compacts to one --out never share a staging folder.
    tmp = staging_folder(out)
    try:
        with writing(out):
            summary = _write(log, tmp, format, progress, row_group_bytes)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # The old log's files go only once the new ones are complete; the folder's other files stay.
    publish_folder(tmp, out, replaced)
    summary.out = out
    summary.files_written = [out / p.name for p in summary.files_written]
    summary.bytes_in = sum(f.path.stat().st_size for f in log.files)
    summary.bytes_out = sum(p.stat().st_size for p in summary.files_written)
    return summary


def _write(
    log: TurnLog, folder: Path, format: int, progress: Callable[[int, int], None] | None, row_group_bytes: int
) -> CompactSummary:
    summary = CompactSummary(out=folder, format=format)
    index = log.index()
    total = len(index.places)
    carried_rows: dict[str, list[int]] = {}  # file -> file rows of invalid sessions
    # One session at a time: nothing but the current session needs holding as a base.
    writer = TurnLogWriter(
        folder,
        tokenizer=log.tokenizer,
        max_age=None,
        name="compact",
        format=format,
        max_open_sessions=1,
        row_group_bytes=row_group_bytes,
    )
    with writer:
        for batch in index.batches(BATCH_BYTES):
            for rows in read_batch(log.turn_files, batch, timestamps=True):
                try:
                    turns = parse_session(rows)
                    # Routed experts decompressed before any turn is written (bad ones carry the session).
                    provenance = [provenance_arguments(turn) for turn in turns]
                except InvalidSessionError as exc:
                    summary.carried.append(Reject(rows.session_id, exc.message, exc.file, exc.row))
                    for raw in rows.rows:
                        carried_rows.setdefault(raw.source.file, []).append(raw.source.row)
                else:
                    for turn, raw, arguments in zip(turns, rows.rows, provenance, strict=True):
                        writer.record_turn(
                            rows.session_id,
                            turn.prompt_ids,
                            turn.output_ids,
                            turn.output_logprobs,
                            turn.finish_reason,
                            turn.prompt_messages,
                            turn.response_message,
                            tools=turn.tools,
                            metadata=turn.metadata,
                            seq=turn.seq,
                            timestamp=raw.timestamp,
                            ill_formed=turn.ill_formed,
                            stamp_now=False,
                            **arguments,
                        )
                    summary.sessions += 1
                    summary.turns += len(turns)
                if progress is not None:
                    progress(summary.sessions + len(summary.carried), total)
    summary.files_written = list(writer.files_written)
    for number, log_file in enumerate(log.turn_files):
        rows_of_file = carried_rows.get(str(log_file.path))
        if rows_of_file:
            target = folder / f"turns-carried-{number:06d}.parquet"
            _copy_rows(log_file, sorted(rows_of_file), target)
            summary.files_written.append(target)
    for number, log_file in enumerate(log.session_files):
        target = folder / f"sessions-copied-{number:06d}.parquet"
        shutil.copyfile(log_file.path, target)
        summary.files_written.append(target)
    summary.carried.sort(key=lambda r: r.session_id)
    return summary


def provenance_arguments(turn: Turn) -> dict[str, Any]:
    """``record_turn``'s provenance arguments that record ``turn``'s provenance again (none without any)."""
    provenance = turn.provenance
    if provenance is None:
        return {}
    experts = provenance.routed_experts
    return {
        "weight_versions": None if provenance.weight_versions is None else list(provenance.weight_versions),
        "sampling": provenance.sampling,
        "call_kind": provenance.call_kind,
        # The rows the log stored, from where it stored them (the writer drops none an earlier call holds).
        "routed_experts": None if experts is None else turn_experts(turn),
        "routed_experts_start": 0 if experts is None else experts.start,
    }


def _copy_rows(log_file: LogFile, rows: list[int], target: Path) -> None:
    """Rows ``rows`` (file row numbers, ascending) of ``log_file`` into ``target``, schema and values unchanged."""
    try:
        with open_parquet_file(log_file.path) as parquet:
            schema = parquet.schema_arrow
            with parquet_writer(target, schema, compression="zstd") as writer:
                first = 0
                taken = 0
                for group in range(parquet.metadata.num_row_groups):
                    size = parquet.metadata.row_group(group).num_rows
                    wanted = []
                    while taken < len(rows) and rows[taken] < first + size:
                        wanted.append(rows[taken] - first)
                        taken += 1
                    if wanted:
                        table = parquet.read_row_group(group, use_threads=False)
                        writer.write_table(table.take(pa.array(wanted, pa.int64())))
                    first += size
    except (OSError, pa.ArrowException) as exc:
        raise UnreadableLogError(f"cannot read ({exc})", file=log_file.path) from None
