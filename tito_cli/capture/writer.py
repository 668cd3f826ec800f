"""The capture side: what a live harness calls once per turn and once per session.

    with TurnLogWriter("logs/", tokenizer="Qwen/Qwen3-8B") as log:
        seq = log.record_turn(sid, prompt_ids, output_ids, logprobs, "stop",
                              messages, response_message)
        ...
        log.finish_session(sid, reward=1.0)

Rows are buffered and each flush writes one complete Parquet file under a
temporary name, fsyncs it and renames it into place, so a killed process
leaves only readable files and loses at most the rows not yet flushed.  A
flush happens when the buffer reaches ``max_rows`` rows or ``max_bytes``
bytes, when its oldest row is ``max_age`` seconds old (checked by a
background thread), on :meth:`flush`, and on :meth:`close`.  A file's row
groups hold at most ``row_group_rows`` rows and about ``row_group_bytes``
bytes, so a reader's working set stays bounded.

Turns are written in format 2 by default (docs/spec.md §8): each turn stored
against the recent turn of its session it shares the most with
(:mod:`tito_cli.capture.delta`); ``format=1`` stores every prompt whole.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .._arrow import list_array
from .._atomic import atomic_path
from ..schema import SESSIONS_SCHEMA, TURNS_SCHEMA, TURNS_SCHEMA_V2, table_metadata
from .delta import DeltaEncoder
from .row_groups import write_row_groups

__all__ = ["TurnLogWriter"]

JsonLike = str | dict[str, Any] | list[Any] | None


def _json_text(value: JsonLike) -> str | None:
    """Store strings as given (already JSON); serialise anything else."""
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


class TurnLogWriter:
    """Buffered, thread-safe writer of the turn log (SPEC §2).

    ``seq`` is assigned per session in arrival order unless given explicitly
    (when importing existing logs); an explicit ``seq`` moves the session's
    counter past it.

    Format 2 keeps, per open session, its last ``delta_candidates`` turns as
    candidate bases (their ids and message texts); at most
    ``max_open_sessions`` sessions and ``max_held_bytes`` bytes are kept, the
    least recently recorded session forgotten first (its next turn is then
    stored whole).  :meth:`finish_session` forgets a session.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        tokenizer: str | None = None,
        max_rows: int = 4096,
        max_bytes: int = 256 << 20,
        max_age: float | None = 60.0,
        compression: str = "zstd",
        name: str | None = None,
        format: int = 2,
        row_group_rows: int = 1024,
        row_group_bytes: int = 64 << 20,
        delta_candidates: int = 4,
        max_open_sessions: int = 1024,
        max_held_bytes: int = 1 << 30,
    ) -> None:
        if max_rows < 1 or max_bytes < 1:
            raise ValueError("max_rows and max_bytes must be positive")
        if format not in (1, 2):
            raise ValueError(f"format must be 1 or 2, not {format!r}")
        if row_group_rows < 1 or row_group_bytes < 1:
            raise ValueError("row_group_rows and row_group_bytes must be positive")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.tokenizer = tokenizer
        self.max_rows = max_rows
        self.max_bytes = max_bytes
        self.max_age = max_age
        self.compression = compression
        self.format = format
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.files_written: list[Path] = []
        self._deltas = (
            DeltaEncoder(candidates=delta_candidates, max_sessions=max_open_sessions, max_bytes=max_held_bytes)
            if format == 2
            else None
        )

        self._lock = threading.Lock()  # guards the buffers and counters
        self._write_lock = threading.Lock()  # one file written at a time
        self._turns: list[dict[str, Any]] = []
        self._sessions: list[dict[str, Any]] = []
        self._buffered_bytes = 0
        self._oldest: float | None = None
        self._next_seq: dict[str, int] = {}
        self._file_counter = 0
        # File names: <table>-<name>-<counter>.parquet.  The default name is
        # unique per writer; pass a fixed one for reproducible logs.
        self._run_id = name or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._closed = False
        self._stop = threading.Event()
        self._ager: threading.Thread | None = None
        if max_age is not None:
            self._ager = threading.Thread(target=self._age_loop, name="tito-capture-flush", daemon=True)
            self._ager.start()

    # -- the harness API -------------------------------------------------

    def record_turn(
        self,
        session_id: str,
        prompt_ids: Sequence[int] | np.ndarray,
        output_ids: Sequence[int] | np.ndarray,
        output_logprobs: Sequence[float] | np.ndarray | None,
        finish_reason: str,
        prompt_messages: JsonLike,
        response_message: JsonLike,
        tools: JsonLike = None,
        metadata: JsonLike = None,
        *,
        seq: int | None = None,
        timestamp: datetime | None = None,
        stamp_now: bool = True,
    ) -> int:
        """Buffer one generation call; returns the ``seq`` it was recorded with.

        Without ``timestamp`` the turn is stamped with the current time, unless
        ``stamp_now`` is false (copying a log whose turns have none).
        """
        prompt = np.asarray(prompt_ids, dtype=np.int32)
        output = np.asarray(output_ids, dtype=np.int32)
        logprobs = None if output_logprobs is None else np.asarray(output_logprobs, dtype=np.float32)
        messages = _json_text(prompt_messages)
        if messages is None:
            raise ValueError("prompt_messages is required (an empty list is allowed)")
        texts = {
            "prompt_messages": messages,
            "response_message": _json_text(response_message),
            "tools": _json_text(tools),
            "metadata": _json_text(metadata),
        }
        size = 4 * (prompt.size + output.size) + (0 if logprobs is None else 4 * logprobs.size)
        size += sum(len(text or "") for text in texts.values())
        row: dict[str, Any] = {
            "session_id": session_id,
            "prompt_ids": prompt,
            "output_ids": output,
            "output_logprobs": logprobs,
            "finish_reason": finish_reason,
            **texts,
            "timestamp": timestamp or (datetime.now(timezone.utc) if stamp_now else None),
        }
        with self._lock:
            self._check_open()
            if seq is None:
                seq = self._next_seq.get(session_id, 0)
            self._next_seq[session_id] = max(self._next_seq.get(session_id, 0), seq + 1)
            row["seq"] = seq
            if self._deltas is not None:
                size += self._store_delta(row, prompt_messages, response_message)
            self._turns.append(row)
            full = self._grow(size)
        if full:
            self._flush(only_if_full=True)
        return seq

    def finish_session(
        self,
        session_id: str,
        reward: float | None,
        index: int | None = None,
        group_index: int | None = None,
        label: str | None = None,
        metadata: JsonLike = None,
    ) -> None:
        """Buffer the sessions row that carries the session's reward."""
        meta_text = _json_text(metadata)
        row: dict[str, Any] = {
            "session_id": session_id,
            "reward": reward,
            "index": index,
            "group_index": group_index,
            "label": label,
            "metadata": meta_text,
        }
        with self._lock:
            self._check_open()
            if self._deltas is not None:
                self._deltas.forget(session_id)
            self._sessions.append(row)
            full = self._grow(64 + len(session_id) + len(meta_text or ""))
        if full:
            self._flush(only_if_full=True)

    def flush(self) -> list[Path]:
        """Write everything buffered; returns the files written (none when empty)."""
        return self._flush()

    def _flush(self, *, only_if_full: bool = False) -> list[Path]:
        with self._write_lock:
            with self._lock:
                # Several threads can see the buffer full at once: the first writes it, the
                # others find it refilling and leave it be (no file of a row or two).
                if only_if_full and not self._is_full():
                    return []
                turns, self._turns = self._turns, []
                sessions, self._sessions = self._sessions, []
                self._buffered_bytes = 0
                self._oldest = None
            written = []
            if turns:
                written.append(self._write("turns", _turns_table(turns, self.tokenizer, self.format)))
            if sessions:
                written.append(self._write("sessions", _sessions_table(sessions)))
            return written

    def close(self) -> None:
        """Flush and stop; further records raise."""
        if self._closed:
            return
        self._stop.set()
        if self._ager is not None:
            self._ager.join()
        self.flush()
        with self._lock:
            self._closed = True

    def __enter__(self) -> TurnLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------

    def _store_delta(self, row: dict[str, Any], messages: JsonLike, response: JsonLike) -> int:
        """Store ``row`` against its base (format 2; lock held); returns the change in its buffered size."""
        assert self._deltas is not None
        delta = self._deltas.encode(
            row["session_id"], row["seq"], row["prompt_ids"], row["output_ids"], messages, response
        )
        row["base_seq"] = delta.base_seq
        row["shared_prompt_ids"] = delta.shared_prompt_ids
        row["shared_messages"] = delta.shared_messages
        if delta.base_seq is None:
            return 0
        before = 4 * int(row["prompt_ids"].size) + len(row["prompt_messages"])
        cell = delta.messages_cell()
        assert cell is not None  # a row with a base stores its new messages
        row["prompt_ids"] = delta.new_ids
        row["prompt_messages"] = cell
        return 4 * int(delta.new_ids.size) + len(cell) - before

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("TurnLogWriter is closed")

    def _grow(self, size: int) -> bool:
        """Account for a buffered row; True when a flush is due (call with the lock held)."""
        self._buffered_bytes += size
        if self._oldest is None:
            self._oldest = time.monotonic()
        return self._is_full()

    def _is_full(self) -> bool:
        rows = len(self._turns) + len(self._sessions)
        return rows >= self.max_rows or self._buffered_bytes >= self.max_bytes

    def _age_loop(self) -> None:
        assert self.max_age is not None
        tick = min(1.0, self.max_age / 4)
        while not self._stop.wait(tick):
            with self._lock:
                due = self._oldest is not None and time.monotonic() - self._oldest >= self.max_age
            if due:
                self.flush()

    def _write(self, kind: str, table: pa.Table) -> Path:
        self._file_counter += 1
        target = self.directory / f"{kind}-{self._run_id}-{self._file_counter:06d}.parquet"
        with atomic_path(target) as tmp:
            write_row_groups(
                table,
                tmp,
                self.compression,
                self.row_group_rows,
                self.row_group_bytes,
                split_numbers=kind == "turns" and self.format == 2,
            )
        self.files_written.append(target)
        return target


def _turns_table(rows: list[dict[str, Any]], tokenizer: str | None, format: int = 1) -> pa.Table:
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
    schema = TURNS_SCHEMA
    if format == 2:
        for name in ("base_seq", "shared_prompt_ids", "shared_messages"):
            columns[name] = pa.array([r[name] for r in rows], pa.int64())
        schema = TURNS_SCHEMA_V2
    schema = schema.with_metadata(table_metadata("turns", tokenizer, format=str(format)))
    return pa.Table.from_pydict(columns, schema=schema)


def _sessions_table(rows: list[dict[str, Any]]) -> pa.Table:
    columns = {name: [r[name] for r in rows] for name in SESSIONS_SCHEMA.names}
    return pa.Table.from_pydict(columns, schema=SESSIONS_SCHEMA.with_metadata(table_metadata("sessions")))
