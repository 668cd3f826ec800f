"""The recorder: durable before acknowledged — every turn and finish in the journal before its answer.

One recorder per gateway owns the session registry (:mod:`.registry`: the one memory bound every per-session
store follows), each session's turn order and ``seq``, the write-ahead journal (:mod:`tito_cli.capture.journal`),
the Parquet writer (written out by :mod:`.segments`) and finishing sessions.

* A request registers with :meth:`Recorder.begin` when it starts and leaves with :meth:`end`;
  :meth:`record` checks its turn against the write contract (``UpstreamError`` 502 naming what the log
  cannot hold), appends it to the journal (``ClientError`` 503 when the log cannot be written) and
  buffers it for the writer; only then may the client be answered.  A session's turns are recorded in
  the order their ``record`` calls came, each after the previous one.
* :meth:`finish` waits for the session's requests in flight, then journals the finish.  A finished
  session refuses turns and a second finish (409), across restarts: the registry is rebuilt at start-up
  from the log and the journals (:mod:`.recovery`).  A session never recorded is a 404.
* Every ``flush_every`` seconds the journal's segment is written out as Parquet (:mod:`.segments`); a
  write that fails makes ``/healthz`` fail with the reason and refuses new turns (503) until a retry
  succeeds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any

from ..capture.journal import Journal, encode_finish, encode_turn
from ..capture.records import sessions_row
from ..capture.writer import RecordedTurn, TurnLogWriter
from ..errors import OutputError
from .exchange import ClientError, UpstreamError
from .pools import in_workers
from .recovery import Known, adopt_journals, known_sessions
from .registry import DEFAULT_LIVE_SESSIONS, SessionRegistry
from .segments import Segments, reason

__all__ = ["Recorder"]

log = logging.getLogger("tito.serve")


class Recorder:
    """The gateway's recording side (see the module's docstring); :meth:`open` before use, :meth:`close` after."""

    def __init__(
        self,
        directory: os.PathLike[str] | str,
        *,
        tokenizer: str | None,
        flush_every: float,
        fsync: bool = False,
        sessions: int = DEFAULT_LIVE_SESSIONS,
        offload: Callable[..., Awaitable[Any]] | None = None,
    ) -> None:
        from pathlib import Path

        self.directory = Path(directory)
        self.tokenizer = tokenizer
        self.flush_every = flush_every
        self.fsync = fsync
        self.run = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.known = Known()
        self.journal: Journal | None = None
        self.writer: TurnLogWriter | None = None
        self.segments: Segments | None = None
        #: The sessions whose state is held (every per-session store registers its forget hook here).
        self.sessions = SessionRegistry(sessions)
        self.sessions.on_forget(self._forget)
        #: Why the journal cannot be appended to now (``/healthz`` fails with it), else None.
        self.append_problem: str | None = None
        #: Set by :meth:`close` when answered turns could not be written as Parquet (they stay in the journal).
        self.unwritten: str | None = None
        self._offload = offload
        self._summaries: dict[str, dict[str, Any]] = {}
        self._finishing: set[str] = set()
        self._tails: dict[str, asyncio.Task[int]] = {}
        self._pending: set[asyncio.Task[Any]] = set()
        self._lock = threading.Lock()  # a journal append and its buffered row, against a rotation
        self._ticker: asyncio.Task[None] | None = None

    # -- life --------------------------------------------------------------------------------

    def open(self) -> None:
        """Adopt dead gateways' journals, learn every session of the folder, start a journal (``OutputError``)."""
        if self.journal is not None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            adopt_journals(self.directory)
            self.journal = Journal(self.directory, self.run, tokenizer=self.tokenizer, fsync=self.fsync)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise OutputError(f"the log folder {self.directory} cannot be written: {why}") from None
        self.known = known_sessions(self.directory)
        self.writer = TurnLogWriter(
            self.directory, tokenizer=self.tokenizer, name=self.run, max_age=None, max_rows=1 << 62, max_bytes=1 << 62
        )
        self.segments = Segments(self.directory, self.journal, self.writer, self._lock)

    def start(self) -> None:
        """Start the rotation ticker (on the running loop)."""
        if self._ticker is None and self.segments is not None:
            ticks = self.segments.tick(self.flush_every, self._run, lambda: self.append_problem)
            self._ticker = asyncio.get_running_loop().create_task(ticks)

    async def close(self) -> None:
        """Record what is queued, write every segment as Parquet; :attr:`unwritten` says what could not be."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self.journal is None or self.segments is None:
            return
        await self._run(self.segments.rotate, self.append_problem)
        rows, segments = self.segments.left()
        if rows:
            self.unwritten = (
                f"{rows} answered rows could not be written as Parquet ({self.problem()}); what is left of them is "
                f"in {', '.join(segments)}, written by the next tito serve on this folder"
            )
        else:
            with contextlib.suppress(OSError):
                self.journal.close()
        assert self.writer is not None
        with contextlib.suppress(OSError):
            self.writer.close()

    async def _run(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._offload is None:
            return fn(*args)
        return await self._offload(fn, *args)

    # -- requests ----------------------------------------------------------------------------

    def begin(self, session_id: str) -> None:
        """A generation request of ``session_id`` starts (409 for a finished or finishing session)."""
        if session_id in self.known.finished or session_id in self._finishing:
            raise ClientError(f"session {session_id!r} is finished: start a new session id", 409)
        self.sessions.enter(session_id)

    def end(self, session_id: str) -> None:
        """The request :meth:`begin` counted has ended (answered, failed or cut short)."""
        self.sessions.leave(session_id)

    @property
    def write_problem(self) -> str | None:
        """Why the journal's rows cannot be written as Parquet now (new turns are refused), else None."""
        return None if self.segments is None else self.segments.problem

    async def record(self, session_id: str, turn: RecordedTurn, summary: dict[str, Any] | None = None) -> int:
        """Journal ``turn`` as the session's next; returns its ``seq``. Raise means: do not answer 200.

        ``summary``: what ``GET /sessions/{id}`` shows of the turn (its ``seq`` added).
        """
        if self.write_problem is not None:
            raise ClientError(f"the turn log cannot be written: {self.write_problem}", 503)
        previous = self._tails.get(session_id)
        task = asyncio.get_running_loop().create_task(self._record(previous, session_id, turn, summary or {}))
        self._tails[session_id] = task
        self._pending.add(task)

        def done(finished: asyncio.Task[int]) -> None:
            self._pending.discard(finished)
            if self._tails.get(session_id) is finished:
                del self._tails[session_id]

        task.add_done_callback(done)
        # Shielded: a cancelled request must not leave a journaled turn unaccounted for.
        return await asyncio.shield(task)

    async def _record(
        self, previous: asyncio.Future[Any] | None, session_id: str, turn: RecordedTurn, summary: dict[str, Any]
    ) -> int:
        if previous is not None:
            await asyncio.wait({previous})
        seq = self.known.next_seq.get(session_id, 0)
        await self._run(self._append_turn_fsynced if self.fsync else self._append_turn, turn, seq)
        self.known.next_seq[session_id] = seq + 1
        self._summary(session_id)["turns"].append({"seq": seq, **summary})
        return seq

    @in_workers  # it waits for the disk: not in the python thread every request's Python work waits for
    def _append_turn_fsynced(self, turn: RecordedTurn, seq: int) -> None:
        self._append_turn(turn, seq)

    def _append_turn(self, turn: RecordedTurn, seq: int) -> None:
        try:
            checked = turn.check()
            experts = turn.experts()
        except ValueError as exc:
            raise UpstreamError(f"the answer cannot be recorded, so it is not given: {exc}", 502) from None
        checked.row["seq"] = seq
        checked.row["timestamp"] = datetime.now(timezone.utc)
        payload = encode_turn(checked.row, experts)  # the experts rows are durable before acknowledged too
        assert self.journal is not None and self.writer is not None and self.segments is not None
        with self._lock:
            if experts is not None:
                try:  # rows of another shape than the session's earlier calls' are never journaled
                    self.writer.check_experts_shape(turn.session_id, experts[0])
                except ValueError as exc:
                    raise UpstreamError(f"the answer cannot be recorded, so it is not given: {exc}", 502) from None
            self._append(payload)
            self.writer.record_checked(checked, seq, experts)
            self.segments.grow(checked.size)

    def _append(self, payload: bytes) -> None:
        assert self.journal is not None
        try:
            self.journal.append(payload)
        except OSError as exc:
            why = reason(exc)
            if self.append_problem != why:
                log.error("tito serve: the turn log in %s cannot be written: %s", self.directory, why)
            self.append_problem = why
            raise ClientError(f"the turn log cannot be written: {why}", 503) from None
        if self.append_problem is not None:
            log.warning("tito serve: the turn log can be written again")
            self.append_problem = None

    # -- sessions ----------------------------------------------------------------------------

    async def finish(self, session_id: str, reward: float | None, body: dict[str, Any]) -> int:
        """Journal the session's finish after its requests in flight; returns how many turns it has."""
        fields: dict[str, Any] = {"session_id": session_id, "reward": reward}
        fields.update((name, body.get(name)) for name in ("index", "group_index", "label", "metadata", "rollout_id"))
        try:
            row = sessions_row(**fields)
        except ValueError as exc:
            raise ClientError(f"cannot finish session {session_id!r}: {exc}") from None
        fields["metadata"] = row["metadata"]
        if session_id in self.known.finished or session_id in self._finishing:
            raise ClientError(f"session {session_id!r} is already finished", 409)
        self._finishing.add(session_id)
        try:
            await self.sessions.quiet(session_id)
            await self.settled(session_id)  # (a request cut short may have left its turn being journaled)
            if session_id not in self.known.next_seq:
                raise ClientError(f"no session {session_id!r}: no turn of it was ever recorded in this log", 404)
            if self.write_problem is not None:
                raise ClientError(f"the turn log cannot be written: {self.write_problem}", 503)
            task = asyncio.get_running_loop().create_task(self._run(self._append_finish, fields))
            self._pending.add(task)
            task.add_done_callback(self._pending.discard)
            await asyncio.shield(task)
            self.known.finished.add(session_id)
            self._summary(session_id)["reward"] = reward
        finally:
            self._finishing.discard(session_id)
        return self.known.next_seq[session_id]

    def _append_finish(self, fields: dict[str, Any]) -> None:
        assert self.writer is not None and self.segments is not None
        payload = encode_finish(fields)
        with self._lock:
            self._append(payload)
            self.writer.finish_session(**fields)
            self.segments.grow(64)

    def report(self, session_id: str) -> dict[str, Any] | None:
        """What ``GET /sessions/{id}`` shows: None for a session never recorded."""
        if session_id not in self.known.next_seq and session_id not in self.known.finished:
            return None
        summary = self._summaries.get(session_id)
        return {
            "session_id": session_id,
            "finished": session_id in self.known.finished,
            "reward": None if summary is None else summary["reward"],
            "recorded": self.known.next_seq.get(session_id, 0),
            "turns": [] if summary is None else list(summary["turns"]),
        }

    async def settled(self, session_id: str) -> None:
        """Wait until the session's turns handed to :meth:`record` are recorded."""
        tail = self._tails.get(session_id)
        if tail is not None:
            await asyncio.wait({tail})

    def _summary(self, session_id: str) -> dict[str, Any]:
        summary = self._summaries.get(session_id)
        if summary is None:
            summary = self._summaries[session_id] = {"turns": [], "reward": None}
        self.sessions.touch(session_id)
        return summary

    def _forget(self, session_id: str) -> None:
        """The registry forgets the session: its summary and the writer's state of it (never its ``seq``)."""
        self._summaries.pop(session_id, None)
        if self.writer is not None:
            self.writer.forget_session(session_id)

    def problem(self) -> str | None:
        """Why the log cannot be written now, or None."""
        return self.write_problem or self.append_problem or (self.journal.broken if self.journal else None)
