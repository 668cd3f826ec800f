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

Every record is checked when it is recorded, against the write contract
(:mod:`tito_cli.capture.records`: what a rebuild would reject a session for,
the writer refuses), so a bad record raises in the caller and never reaches
the buffer, where a failing flush would take every other session's rows with
it.  Files are written by :mod:`.log_files`; a flush that fails anyway (a
full disk) keeps its rows buffered for the next one.  Files never replace each other: a name already taken (a restarted
harness with the same ``name=``, a writer shared across ``fork()``) moves on
to the next free number, and a forked child starts with an empty buffer of
its own (its parent still holds the rows buffered before the fork).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import uuid
import weakref
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .delta import DeltaEncoder
from .log_files import sessions_table, turns_table, write_new_file
from .provenance import ExpertsLedger, compress_rows, experts_rows, provenance_cells
from .recorded_turn import RecordedTurn
from .records import JsonLike, PromptMessages, TurnRow, sessions_row, turn_row
from .row_groups import ROW_GROUP_BYTES, ROW_GROUP_ROWS

__all__ = ["RecordedTurn", "TurnLogWriter"]

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

    #: The write contract every record is checked against (tests write foreign rows with ``stored_row``).
    _turn_row = staticmethod(turn_row)

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
        self._experts = ExpertsLedger(sessions=max_open_sessions)

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
        self._experts.forget_all()
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
        prompt_messages: JsonLike | PromptMessages,
        response_message: JsonLike,
        tools: JsonLike = None,
        metadata: JsonLike = None,
        *,
        seq: int | None = None,
        timestamp: datetime | None = None,
        ill_formed: bool = False,
        stamp_now: bool = True,
        weight_versions: str | Sequence[Any] | None = None,
        routed_experts: np.ndarray | Sequence[Any] | None = None,
        routed_experts_start: int = 0,
        sampling: JsonLike = None,
        call_kind: str | None = None,
    ) -> int:
        """Buffer one generation call; returns the ``seq`` it was recorded with.

        Raises ``ValueError`` (recording nothing) for a record that breaks the
        write contract (:func:`~tito_cli.capture.records.turn_row`): ids that
        are not a 1-D sequence of integers in 0..2**31-1, non-finite logprobs
        or not one per output id, a ``session_id`` or ``finish_reason`` that
        is not a str, a ``seq`` that is not a non-negative int64, JSON values
        that are not strict JSON (text included), a prompt that is not an
        array of messages with a string role.

        ``ill_formed``: the harness could not parse the output into a message
        (``response_message`` is then its best effort or null); slime-0.3 flags
        the samples of every leaf through the turn (docs/spec.md §8.6).

        Provenance (docs/spec.md §2, all optional): ``weight_versions``, the
        spans ``{version, start, end}`` over the output token indices that each
        weight version generated (a str: one version for every output token);
        ``routed_experts``, int rows ``[rows, layers, topk]`` for the call's
        token positions ``[routed_experts_start, len(prompt) + len(output) - 1)``
        (rows of positions an earlier call of the session stored for the same
        prefix are not stored again); ``sampling``, the sampling parameters
        sent upstream (a JSON object); ``call_kind``, ``agent`` or
        ``auxiliary``.
        """
        checked = self._turn_row(
            session_id,
            prompt_ids,
            output_ids,
            output_logprobs,
            finish_reason,
            prompt_messages,
            response_message,
            tools,
            metadata,
            seq=seq,
            timestamp=timestamp,
            ill_formed=ill_formed,
        )
        row = checked.row
        outputs = int(row["output_ids"].size)
        row.update(provenance_cells(outputs, weight_versions, sampling, call_kind))
        experts = None
        if routed_experts is not None:
            experts = experts_rows(routed_experts, routed_experts_start, int(row["prompt_ids"].size) + outputs)
        if timestamp is None and stamp_now:
            checked.row["timestamp"] = datetime.now(timezone.utc)
        return self.record_checked(checked, seq, experts)

    def record(self, turn: RecordedTurn, *, seq: int | None = None, timestamp: datetime | None = None) -> int:
        """:meth:`record_turn` for a turn given as one value (the same checks, the same row)."""
        checked = turn.check()
        experts = turn.experts()
        checked.row["timestamp"] = timestamp or datetime.now(timezone.utc)
        return self.record_checked(checked, seq, experts)

    def record_checked(
        self, checked: TurnRow, seq: int | None, experts: tuple[np.ndarray, int] | None = None
    ) -> int:
        """Buffer a row :func:`~tito_cli.capture.records.turn_row` made (its timestamp set); returns its ``seq``.

        ``experts``: the turn's routed-experts rows and their start (:func:`.provenance.experts_rows`).
        """
        row, size = checked.row, checked.size
        session_id = row["session_id"]
        with self._lock:
            self._check_open()
            if experts is not None:
                size += self._store_experts(row, *experts)
            if seq is None:
                seq = self._next_seq.get(session_id, 0)
            self._next_seq[session_id] = max(self._next_seq.get(session_id, 0), seq + 1)
            row["seq"] = seq
            if self._deltas is not None:
                size += self._store_delta(row, checked.messages, checked.response)
            self._turns.append(row)
            full = self._grow(size)
        if full:
            self._flush(only_if_full=True)
        return seq

    def forget_session(self, session_id: str) -> None:
        """Drop what is held for ``session_id``: its next ``seq`` (give ``seq`` explicitly after), its delta
        bases and experts rows (its next turn is stored whole)."""
        with self._lock:
            self._next_seq.pop(session_id, None)
            if self._deltas is not None:
                self._deltas.forget(session_id)
            self._experts.forget(session_id)

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
            self._experts.forget(session_id)
            self._sessions.append(row)
            full = self._grow(64 + len(session_id) + len(row["metadata"] or ""))
        if full:
            self._flush(only_if_full=True)

    def take_buffer(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Empty the buffer: its turns rows and sessions rows, for :meth:`write_rows` (the caller keeps them)."""
        with self._lock:
            turns, self._turns = self._turns, []
            sessions, self._sessions = self._sessions, []
            self._buffered_bytes = 0
            self._oldest = None
        return turns, sessions

    def write_rows(self, turns: list[dict[str, Any]], sessions: list[dict[str, Any]], number: int) -> list[Path]:
        """Write rows taken from the buffer as ``turns-<name>-<number>`` and ``sessions-<name>-<number>``.

        ``FileExistsError`` when a name is taken (the rows are there already).
        """
        written = []
        with self._write_lock:
            if turns:
                table = turns_table(turns, self.tokenizer, self.format)
                written.append(self._write("turns", table, iter([number])))
            if sessions:
                written.append(self._write("sessions", sessions_table(sessions), iter([number])))
        return written

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
                    written.append(self._write("turns", turns_table(turns, self.tokenizer, self.format)))
                    turns = []
                if sessions:
                    written.append(self._write("sessions", sessions_table(sessions)))
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

    def _store_delta(self, row: dict[str, Any], messages: Any, response: Any) -> int:
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

    def check_experts_shape(self, session_id: str, rows: np.ndarray) -> None:
        """``ValueError`` when ``rows`` have another shape than the session's earlier calls' rows."""
        self._experts.check_shape(session_id, (int(rows.shape[1]), int(rows.shape[2])))

    def _store_experts(self, row: dict[str, Any], rows: np.ndarray, start: int) -> int:
        """Store the rows the session does not already hold (lock held); returns their buffered size."""
        session_id = row["session_id"]
        shape = (int(rows.shape[1]), int(rows.shape[2]))
        self._experts.check_shape(session_id, shape)
        tokens = np.concatenate([row["prompt_ids"], row["output_ids"]])
        reach = min(self._experts.held_until(session_id, tokens, start), start + len(rows))
        self._experts.add(session_id, tokens, start, start + len(rows))
        self._experts.remember_shape(session_id, shape)
        data = compress_rows(rows[reach - start :])
        row["routed_experts"] = data
        row["routed_experts_start"] = reach
        row["routed_experts_layers"], row["routed_experts_topk"] = shape
        return len(data)

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

    def _write(self, kind: str, table: pa.Table, numbers: Iterator[int] | None = None) -> Path:
        counter = itertools.count(self._file_counter + 1) if numbers is None else numbers
        target = write_new_file(
            self.directory,
            kind,
            self._run_id,
            counter,
            table,
            self.compression,
            self.row_group_rows,
            self.row_group_bytes,
            split_numbers=kind == "turns" and self.format == 2,
        )
        if numbers is None:
            self._file_counter = next(counter) - 1
        self.files_written.append(target)
        return target
