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

Turns are written in format 2 by default (docs/spec.md §9): each turn stored
against the recent turn of its session it shares the most with
(:mod:`tito_cli.capture.delta`); ``format=1`` stores every prompt whole.

Every record is checked when it is recorded (ids are 1-D sequences of
integers in 0..2**31-1, exactly; texts are strings; JSON is strict JSON), so
that a bad record raises in the caller and never reaches the buffer: a flush
cannot fail on one bad row and take every other session's rows with it.  A
flush that fails anyway (a full disk) keeps its rows buffered for the next
one.  Files never replace each other: a name already taken (a restarted
harness with the same ``name=``, a writer shared across ``fork()``) moves on
to the next free number, and a forked child starts with an empty buffer of
its own (its parent still holds the rows buffered before the fork).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .._arrow import list_array
from .._atomic import fsync_directory
from ..schema import PROVENANCE_KEY, SESSIONS_SCHEMA, TURNS_SCHEMA, TURNS_SCHEMA_V2, table_metadata
from .delta import DeltaEncoder
from .row_groups import ROW_GROUP_BYTES, ROW_GROUP_ROWS, write_row_groups

__all__ = ["TurnLogWriter", "sessions_row"]

JsonLike = str | dict[str, Any] | list[Any] | None


_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1


def _json_text(value: JsonLike, what: str) -> str | None:
    """Store strings as given (already JSON); serialise anything else as strict JSON."""
    if value is None or isinstance(value, str):
        return value
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and no reader of the log would accept them.
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{what} cannot be stored as JSON ({exc})") from None


def _one_dimensional(value: Sequence[float] | np.ndarray, what: str, items: str) -> np.ndarray:
    """``value`` as a numpy array of one dimension (any dtype yet), or ``ValueError`` naming ``what``."""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not a sequence of {items} ({exc})") from None
    if array.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got {array.ndim} dimensions")
    return array


def _token_ids(value: Sequence[int] | np.ndarray, what: str) -> np.ndarray:
    """``value`` as int32 ids, exactly: a 1-D sequence of integers in 0..2**31-1, or ``ValueError``.

    ``np.asarray(value, dtype=np.int32)`` would wrap 2**32 + 5 to 5, truncate
    1.7 to 1 and take a row of a 2-D array: ids that were never generated.
    """
    array = _one_dimensional(value, what, "integers")
    if array.size == 0:
        return np.zeros(0, dtype=np.int32)
    if array.dtype.kind == "O" and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in array):
        # Python ints beyond int64: out of range, said below with the value itself.
        bad = next((int(v) for v in array if not 0 <= int(v) <= _INT32_MAX), None)
        if bad is not None:
            raise ValueError(f"{what} holds {bad}, outside 0..{_INT32_MAX}")
        return array.astype(np.int32)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integers, got {array.dtype}")
    if int(array.min()) < 0 or int(array.max()) > _INT32_MAX:
        bad = array[(array < 0) | (array > _INT32_MAX)][0]
        raise ValueError(f"{what} holds {int(bad)}, outside 0..{_INT32_MAX}")
    return array.astype(np.int32, copy=False)


def _logprobs(value: Sequence[float] | np.ndarray | None) -> np.ndarray | None:
    if value is None:
        return None
    array = _one_dimensional(value, "output_logprobs", "numbers")
    if array.size == 0:
        return np.zeros(0, dtype=np.float32)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"output_logprobs must hold numbers, got {array.dtype}")
    result = array.astype(np.float32)
    if not np.isfinite(result).all():
        raise ValueError("output_logprobs holds NaN or infinity (or a value beyond float32)")
    return result


def _check_text(value: object, what: str, *, required: bool) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not encodable as UTF-8 ({exc.reason} at {exc.start})") from None


def _check_int(value: object, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be an int, got {type(value).__name__}")
    if not -_INT64_MAX - 1 <= int(value) <= _INT64_MAX:
        raise ValueError(f"{what} {int(value)} is beyond int64")


#: Live writers, so that a forked child can give each a fresh buffer (see _after_fork_in_child).
_WRITERS: weakref.WeakSet[TurnLogWriter] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for writer in list(_WRITERS):
        writer._reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
        row_group_rows: int = ROW_GROUP_ROWS,
        row_group_bytes: int = ROW_GROUP_BYTES,
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
        # unique per writer; pass a fixed one for reproducible logs (a name
        # already taken in the folder moves on to the next free counter).
        self._name = name
        self._run_id = name or f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._closed = False
        #: The last error of a flush the age thread started (the rows stayed buffered).
        self.last_flush_error: BaseException | None = None
        self._stop = threading.Event()
        self._ager: threading.Thread | None = None
        self._start_ager()
        _WRITERS.add(self)

    def _start_ager(self) -> None:
        if self.max_age is not None:
            self._ager = threading.Thread(target=self._age_loop, name="tito-capture-flush", daemon=True)
            self._ager.start()

    def _reset_after_fork(self) -> None:
        """In a forked child: an empty buffer, fresh locks, a name of its own, and its own age thread.

        The parent still holds (and will write) the rows buffered before the
        fork; writing them here too would record every one of them twice.
        Locks are made anew: another thread of the parent may have held them.
        """
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._turns, self._sessions = [], []
        self._buffered_bytes = 0
        self._oldest = None
        self.files_written = []
        if self._deltas is not None:
            # Its turns are stored against its own turns only: a base buffered in the parent
            # reaches disk only if the parent lives to flush it.
            self._deltas.forget_all()
        if self._name is None:
            self._run_id = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._stop = threading.Event()
        self._ager = None
        if not self._closed:
            self._start_ager()

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
        ill_formed: bool = False,
        stamp_now: bool = True,
    ) -> int:
        """Buffer one generation call; returns the ``seq`` it was recorded with.

        Raises ``ValueError`` (recording nothing) for a record the log cannot
        hold exactly: ids that are not a 1-D sequence of integers in
        0..2**31-1, non-finite logprobs, a ``session_id`` or ``finish_reason``
        that is not a str, a ``seq`` that is not a non-negative int, or JSON
        values that are not strict JSON.

        ``ill_formed``: the harness could not parse the output into a message
        (``response_message`` is then its best effort or null); slime-0.3 flags
        the samples of every leaf through the turn (docs/spec.md §8.6).
        """
        _check_text(session_id, "session_id", required=True)
        prompt = _token_ids(prompt_ids, "prompt_ids")
        output = _token_ids(output_ids, "output_ids")
        logprobs = _logprobs(output_logprobs)
        _check_text(finish_reason, "finish_reason", required=True)
        _check_int(seq, "seq")
        if seq is not None and seq < 0:
            raise ValueError(f"seq must not be negative, got {seq}")
        if timestamp is not None and not isinstance(timestamp, datetime):
            raise ValueError(f"timestamp must be a datetime, got {type(timestamp).__name__}")
        if not isinstance(ill_formed, bool):
            raise ValueError(f"ill_formed must be a bool, got {type(ill_formed).__name__}")
        messages = _json_text(prompt_messages, "prompt_messages")
        if messages is None:
            raise ValueError("prompt_messages is required (an empty list is allowed)")
        texts = {
            "prompt_messages": messages,
            "response_message": _json_text(response_message, "response_message"),
            "tools": _json_text(tools, "tools"),
            "metadata": _json_text(metadata, "metadata"),
        }
        for name, text in texts.items():
            _check_text(text, name, required=False)
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
            "ill_formed": bool(ill_formed),
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
        *,
        rollout_id: int | None = None,
    ) -> None:
        """Buffer the sessions row that carries the session's reward (``ValueError`` for a bad one).

        ``rollout_id`` (slime's, docs/spec.md §8.8) is copied to every sample;
        samples of a session without one carry its ``index``.
        """
        row = sessions_row(session_id, reward, index, group_index, label, metadata, rollout_id=rollout_id)
        with self._lock:
            self._check_open()
            if self._deltas is not None:
                self._deltas.forget(session_id)
            self._sessions.append(row)
            full = self._grow(64 + len(session_id) + len(row["metadata"] or ""))
        if full:
            self._flush(only_if_full=True)

    def flush(self) -> list[Path]:
        """Write everything buffered; returns the files written (none when empty).

        If writing fails (a full disk, a vanished folder), the rows not
        written go back into the buffer, ahead of rows recorded since, and the
        error is raised: the next flush tries them again.
        """
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
                size, self._buffered_bytes = self._buffered_bytes, 0
                oldest, self._oldest = self._oldest, None
            written = []
            try:
                if turns:
                    written.append(self._write("turns", _turns_table(turns, self.tokenizer, self.format)))
                    turns = []
                if sessions:
                    written.append(self._write("sessions", _sessions_table(sessions)))
                    sessions = []
            except BaseException:
                with self._lock:
                    self._turns[:0] = turns
                    self._sessions[:0] = sessions
                    self._buffered_bytes += size
                    if oldest is not None:
                        self._oldest = oldest if self._oldest is None else min(oldest, self._oldest)
                raise
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
                try:
                    self.flush()
                except Exception as exc:
                    # The thread must survive: it is the only thing flushing an idle writer.
                    self.last_flush_error = exc
                else:
                    self.last_flush_error = None

    def _write(self, kind: str, table: pa.Table) -> Path:
        """Write ``table`` as a new file of the folder, never over an existing one.

        The file is written under a hidden temporary name, fsynced, then
        linked to its final name: a link fails where a rename would replace,
        so a taken name (another process, an earlier run with the same
        ``name=``) moves on to the next counter.
        """
        tmp = self.directory / f".{kind}-{self._run_id}-{uuid.uuid4().hex[:12]}.tmp"
        try:
            write_row_groups(
                table,
                tmp,
                self.compression,
                self.row_group_rows,
                self.row_group_bytes,
                split_numbers=kind == "turns" and self.format == 2,
            )
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            while True:
                self._file_counter += 1
                target = self.directory / f"{kind}-{self._run_id}-{self._file_counter:06d}.parquet"
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
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        fsync_directory(self.directory)
        self.files_written.append(target)
        return target



def sessions_row(
    session_id: str,
    reward: float | None,
    index: int | None = None,
    group_index: int | None = None,
    label: str | None = None,
    metadata: JsonLike = None,
    *,
    rollout_id: int | None = None,
) -> dict[str, Any]:
    """The sessions row :meth:`TurnLogWriter.finish_session` buffers, checked (``ValueError`` for a bad one).

    Callers that must refuse a whole session before any of its turns is buffered (the importers) check its
    row with this first.
    """
    _check_text(session_id, "session_id", required=True)
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward)
    ):
        raise ValueError(f"reward must be a finite number or None, got {reward!r}")
    _check_int(index, "index")
    _check_int(group_index, "group_index")
    _check_int(rollout_id, "rollout_id")
    _check_text(label, "label", required=False)
    if metadata is not None and not isinstance(metadata, (str, dict)):
        raise ValueError(f"metadata must be a JSON object, got {type(metadata).__name__}")
    if isinstance(metadata, dict) and PROVENANCE_KEY in metadata:
        raise ValueError(f"metadata key {PROVENANCE_KEY!r} is reserved for the samples' provenance")
    meta_text = _json_text(metadata, "metadata")
    _check_text(meta_text, "metadata", required=False)
    row: dict[str, Any] = {
        "session_id": session_id,
        "reward": reward,
        "index": index,
        "group_index": group_index,
        "label": label,
        "metadata": meta_text,
        "rollout_id": rollout_id,
    }
    return row


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
    columns["ill_formed"] = pa.array([r["ill_formed"] for r in rows], pa.bool_())
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
