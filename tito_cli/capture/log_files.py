"""The turn log's files: buffered rows as an Arrow table, written as a new file that never replaces another.

A file is written under a hidden temporary name, fsynced, then linked to its
final name ``<table>-<name>-<counter>.parquet``: a link fails where a rename
would replace, so a taken name (another process, an earlier run with the
same ``name=``) moves on to the next counter.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._arrow import list_array
from .._atomic import fsync_directory, remove_unlocked
from ..schema import PROVENANCE_FIELDS, SESSIONS_SCHEMA, TURNS_SCHEMA, TURNS_SCHEMA_V2, table_metadata
from .row_groups import write_row_groups

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = ["sessions_table", "sweep_temporaries", "turns_table", "write_new_file"]


def write_new_file(
    directory: Path,
    kind: str,
    name: str,
    counters: Iterator[int],
    table: pa.Table,
    compression: str,
    row_group_rows: int,
    row_group_bytes: int,
    *,
    split_numbers: bool,
) -> Path:
    """Write ``table`` as a new file of ``directory``, never over an existing one; returns its path.

    ``counters`` gives the counters to try, in order: the file takes the first
    whose name is free (the caller goes on from the next one).
    """
    tmp = directory / f".{kind}-{name}-{uuid.uuid4().hex[:12]}.tmp"
    # Locked while it is written: the sweep at a gateway's start-up leaves it be.
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        write_row_groups(table, tmp, compression, row_group_rows, row_group_bytes, split_numbers=split_numbers)
        os.fsync(fd)
        for counter in counters:
            target = directory / f"{kind}-{name}-{counter:06d}.parquet"
            try:
                os.link(tmp, target)
            except FileExistsError:
                continue
            except OSError:
                # A filesystem without hard links: rename, after looking (a race only there).
                if target.exists():
                    continue
                os.rename(tmp, target)
            break
        else:
            raise FileExistsError(f"{directory}: every {kind} file name offered is taken")
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        os.close(fd)
    fsync_directory(directory)
    return target


_TEMPORARY = re.compile(r"\.(turns|sessions)-.+-[0-9a-f]{12}\.tmp")


def sweep_temporaries(directory: Path) -> list[Path]:
    """Remove the ``.turns-*.tmp`` / ``.sessions-*.tmp`` files killed writers left in ``directory``.

    A temporary whose lock a live writer holds is kept (where ``flock`` is real).
    """
    try:
        names = sorted(name for name in os.listdir(directory) if _TEMPORARY.fullmatch(name))
    except OSError:
        return []
    return remove_unlocked([directory / name for name in names])


def turns_table(rows: list[dict[str, Any]], tokenizer: str | None, format: int = 1) -> pa.Table:
    # Keep each session's rows together (better compression, cheaper reads).
    rows.sort(key=lambda r: (r["session_id"], r["seq"]))
    columns = {
        "session_id": pa.array([r["session_id"] for r in rows], pa.string()),
        "seq": pa.array([r["seq"] for r in rows], pa.int64()),
        "prompt_ids": list_array([r["prompt_ids"] for r in rows], pa.int32()),
        "output_ids": list_array([r["output_ids"] for r in rows], pa.int32()),
        "output_logprobs": list_array([r["output_logprobs"] for r in rows], pa.float32()),
    }
    for name in ("finish_reason", "prompt_messages", "response_message", "tools", "metadata"):
        columns[name] = pa.array([r[name] for r in rows], pa.string())
    columns["timestamp"] = pa.array([r["timestamp"] for r in rows], pa.timestamp("us", tz="UTC"))
    columns["ill_formed"] = pa.array([r["ill_formed"] for r in rows], pa.bool_())
    schema = TURNS_SCHEMA
    if format == 2:
        for name in ("base_seq", "shared_prompt_ids", "shared_messages"):
            columns[name] = pa.array([r[name] for r in rows], pa.int64())
        schema = TURNS_SCHEMA_V2
    if any("call_kind" in r or "weight_versions" in r or "sampling" in r or "routed_experts" in r for r in rows):
        # Only a file with provenance has its columns: a log without any reads (and is) as before.
        for field in PROVENANCE_FIELDS:
            columns[field.name] = pa.array([r.get(field.name) for r in rows], field.type)
        schema = pa.schema([*schema, *PROVENANCE_FIELDS])
    schema = schema.with_metadata(table_metadata("turns", tokenizer, format=str(format)))
    return pa.Table.from_pydict(columns, schema=schema)


def sessions_table(rows: list[dict[str, Any]]) -> pa.Table:
    columns = {name: [r[name] for r in rows] for name in SESSIONS_SCHEMA.names}
    return pa.Table.from_pydict(columns, schema=SESSIONS_SCHEMA.with_metadata(table_metadata("sessions")))
