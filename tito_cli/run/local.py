"""Rebuilding a whole log: batches of sessions, worker processes, samples in session-id order.

    for output in rebuild_outputs(corpus, policy, workers=2, spill_dir=out.parent):
        ...   # SessionOutput (samples as Arrow rows + counts) or Reject, in session-id order

The log's index (``session_id`` and ``seq`` only) is cut into batches of
sessions in *log order*, the order sessions finish in the files, so that a
batch reads few row groups that another batch also reads.  Each batch is
read, routed and linearized by :func:`rebuild_batch`, in this process (one
worker) or in a pool of spawned processes; a worker sends back only each
session's sample rows and counts, never the turns or the tree.  Outputs come
back in log order and :class:`_InOrder` hands them out in session-id order,
parking early arrivals in a spill file, so memory does not grow with the
corpus and the written file is the same for any number of workers.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import multiprocessing
import os
import sys
import tempfile
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

import numpy as np
import pyarrow as pa

from ..algorithm.policy import Policy
from ..read.files import LogFile
from ..read.index import LogIndex, ReadBatch
from ..read.index_pass import FileMap
from ..read.rows import read_batch
from ..schema import SAMPLES_SCHEMA
from ..turns import Reject, RowRef, SessionInfo
from .corpus import Corpus, SessionFacts, SessionOutput, session_output
from .lifetime import handoff_folder, new_pool

__all__ = [
    "BatchTask",
    "SessionOutput",
    "decoded_bytes",
    "default_workers",
    "early_pool",
    "file_map",
    "iter_batch",
    "plan_batches",
    "rebuild_batch",
    "rebuild_outputs",
    "work_bytes",
    "worker_cap",
    "workers_for",
]


def default_workers() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


#: Logs with less work than this (:func:`work_bytes`) are rebuilt in-process:
#: starting workers costs more than it saves.
MIN_PARALLEL_BYTES = 64 << 20

#: A turn's own work (parsing its new messages, routing, linearizing, its
#: share of the samples), as the decoded bytes that take as long to decode.
#: Format 2 stores a turn in a fraction of format 1's bytes but leaves this
#: work the same, so bytes alone called a log of many short format-2 sessions
#: small while two workers rebuilt it faster (docs/performance.md, Decisions).
TURN_WORK_BYTES = 16 << 10

#: Batch size bound (decoded turn columns; a batch closes at the session that
#: reaches it).  A worker holds its batch's sample rows until the batch is
#: done, so batches must not grow with the log.
MAX_BATCH_BYTES = 512 << 20


#: Batches per worker: more keep every core busy to the end (a batch runs on one
#: core, and the last one to finish runs alone: half a batch of idle core on
#: average); cuts fall between sessions that share no row group
#: (LogIndex.batches), so more batches cost little re-reading.
BATCHES_PER_WORKER = 8


#: With at least this many files per worker, the workers start before the files
#: are opened and open them (classifying and indexing each: a few tenths of a
#: millisecond a file, serial otherwise).
OPEN_FILES_PER_WORKER = 8


@contextlib.contextmanager
def early_pool(files: int, workers: int) -> Iterator[ProcessPoolExecutor | None]:
    """Start ``workers`` processes now, before the log's ``files`` are opened, if there are many.

    Everything before the first batch runs in one process while the other
    cores wait, and opening and indexing the files is a large part of that
    serial start (docs/performance.md).  Yields the pool (``None`` when the files are opened
    in-process) for :func:`file_map` and then :func:`rebuild_outputs`; it is
    shut down on leaving.
    """
    if workers <= 1 or files < OPEN_FILES_PER_WORKER * workers:
        yield None
        return
    pool = new_pool(workers, worker_context())
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def file_map(pool: ProcessPoolExecutor | None, files: int, workers: int) -> FileMap | None:
    """``pool``'s ``map`` for a pass over ``files`` files (``None`` without a pool: in-process)."""
    if pool is None:
        return None
    # A few tasks per worker: one per file would cost a round trip each.
    return functools.partial(pool.map, chunksize=-(-files // (4 * workers)))


#: Batches never decode more than this much of the log's row groups in all (a row group
#: needed by two batches is decoded twice): plan_batches makes fewer, larger batches
#: rather than more than this.
MAX_DECODE_OVERHEAD = 1.25


def decoded_bytes(batches: list[ReadBatch]) -> float:
    """Decoded row-group bytes the batches read in all.

    Each batch decodes every row group it touches; a row group read in slices,
    from its start up to the last slice the batch needs (pyarrow cannot start
    a row group at a row offset, :attr:`RowGroup.read_bytes`).
    """
    if not batches:
        return 0.0
    row_groups = batches[0].row_groups
    # Per entry of the index's row groups (a row group, or a slice of one): the row group it
    # belongs to, numbered, and what reading up to its end costs.
    numbers: dict[tuple[int, int], int] = {}
    parent = np.array([numbers.setdefault((g.file, g.index), len(numbers)) for g in row_groups], dtype=np.int64)
    cost = np.array([g.read_bytes for g in row_groups], dtype=np.float64)
    total = 0.0
    for batch in batches:
        if not batch.sessions:
            continue
        used = np.zeros(len(row_groups), dtype=bool)
        used[np.concatenate([place.groups for place in batch.sessions])] = True
        through = np.zeros(len(numbers), dtype=np.float64)
        np.maximum.at(through, parent[used], cost[used])
        total += float(through.sum())
    return total


def work_bytes(index: LogIndex) -> float:
    """A rebuild's work on the log, in decoded bytes: its turn columns, and :data:`TURN_WORK_BYTES` a turn."""
    return index.nbytes + TURN_WORK_BYTES * len(index.rows)


def workers_for(index: LogIndex, cores: int) -> int:
    """How many of ``workers`` processes the log's batches can use (1: rebuild in-process).

    The default worker count (``cores``: the machine's), and the count an
    explicit ``--workers`` is capped to: as many as :func:`plan_batches`
    makes batches, which it keeps to a number that decodes the log's row
    groups at most :data:`MAX_DECODE_OVERHEAD` times.
    """
    if cores <= 1 or work_bytes(index) < MIN_PARALLEL_BYTES:
        return 1
    return min(cores, len(plan_batches(index, cores)))


def plan_batches(index: LogIndex, workers: int, batch_bytes: float | None = None) -> list[ReadBatch]:
    """Cut the log into batches for ``workers`` processes.

    One worker reads the whole log in one log-order sweep (memory follows the
    sessions open at a time).  Several workers get several batches each (up
    to about MAX_BATCH_BYTES), shrinking toward the end of the log so that
    the workers finish together.  Batches that share row groups each decode
    them (a log whose row groups each hold turns of every session, or a few
    huge row groups cut into slices), so when that plan would decode the log
    more than :data:`MAX_DECODE_OVERHEAD` times, the batches are halved in
    number until it does not; when even two batches would, the log is one
    batch (one worker: two would have been slower).  ``batch_bytes``
    overrides the size (tests use it to force many batches).
    """
    if batch_bytes is not None:
        return index.batches(batch_bytes)
    sweep = index.batches(float("inf"))
    if workers <= 1 or work_bytes(index) < MIN_PARALLEL_BYTES:
        return sweep
    budget = MAX_DECODE_OVERHEAD * decoded_bytes(sweep)
    plan = _spread(index, workers)
    count = BATCHES_PER_WORKER * workers
    while decoded_bytes(plan) > budget:
        count //= 2
        if count < 2:
            return sweep
        target = min(index.nbytes / count, MAX_BATCH_BYTES)
        # Cut at clean cuts only when they come; or at the size, shared row groups or not
        # (a log of huge row groups in slices may have no clean cut where it is needed).
        candidates = (index.batches(target), index.batches(target, force_at=1))
        plan = min(candidates, key=lambda batches: (decoded_bytes(batches) > budget, -len(batches)))
    return plan


def _spread(index: LogIndex, workers: int) -> list[ReadBatch]:
    """BATCHES_PER_WORKER batches per worker, shrinking toward the end of the log."""
    target = min(index.nbytes / (BATCHES_PER_WORKER * workers), MAX_BATCH_BYTES)
    return index.batches(target, finish_together=workers)


def worker_cap(index: LogIndex, workers: int) -> int | None:
    """The workers an explicit count ``workers`` comes down to because more would decode the
    log's row groups over :data:`MAX_DECODE_OVERHEAD` times (``None``: not capped for that).

    A small log is rebuilt in-process whatever the count (:data:`MIN_PARALLEL_BYTES`): not a cap.
    """
    if workers <= 1 or work_bytes(index) < MIN_PARALLEL_BYTES:
        return None
    usable = workers_for(index, workers)
    if usable < workers and usable < min(workers, len(_spread(index, workers))):
        return usable
    return None


@dataclass(frozen=True, slots=True)
class BatchTask:
    """Everything one batch's rebuild needs: what a worker process receives (pickled)."""

    files: list[LogFile]
    batch: ReadBatch
    #: The sessions rows of the batch's sessions, and the unusable ones.
    infos: Mapping[str, SessionInfo]
    invalid: dict[str, tuple[str, RowRef]]
    policy: Policy
    #: Fills each report's ``drift_classes`` (see :func:`~tito_cli.run.rebuild.rebuild`).
    count_drift: SessionFacts | None = None


def iter_batch(task: BatchTask) -> Iterator[SessionOutput | Reject]:
    """Read, validate, route and linearize one batch, session by session, in batch order."""
    for rows in read_batch(task.files, task.batch):
        output = session_output(rows, task.infos, task.invalid, task.policy, task.count_drift)
        del rows
        yield output


def rebuild_batch(task: BatchTask, *, handoff_dir: str | None = None) -> list[SessionOutput | Reject]:
    """:func:`iter_batch` as a list: the task a worker process runs.

    With ``handoff_dir``, the sample rows travel in a file there (see
    :class:`_Handoff`) and each output's ``table`` is left ``None``.
    """
    outputs = list(iter_batch(task))
    if handoff_dir is not None:
        _Handoff.write(outputs, handoff_dir)
    return outputs


class _Handoff:
    """Sample rows from a worker to the writer through a file instead of the result pipe.

    Pickling a batch's tables through the pipe copies every token three
    times more (pickle, pipe, unpickle), on the writer's side too, and the
    writer is the one serial stage.  A worker writes its batch's rows to one
    Arrow IPC file; the writer maps it and hands the tables to the Parquet
    writer without copying them.  The file is unlinked as soon as it is
    mapped.
    """

    @staticmethod
    def write(outputs: list[SessionOutput | Reject], folder: str) -> None:
        rebuilt = [o for o in outputs if isinstance(o, SessionOutput)]
        try:
            fd, path = tempfile.mkstemp(prefix="batch-", suffix=".arrow", dir=folder)
        except FileNotFoundError:
            if os.path.isdir(folder):
                raise
            # No tito process removes a live run's folder (lifetime.py): something else cleaned $TMPDIR.
            message = (
                "the handoff folder was removed while the rebuild ran, and not by tito "
                f"(something cleaning {os.path.dirname(folder)}? set TMPDIR to a folder of its own)"
            )
            raise FileNotFoundError(errno.ENOENT, message, folder) from None
        with os.fdopen(fd, "wb") as sink, pa.ipc.new_file(sink, SAMPLES_SCHEMA) as stream:
            batch_number = 0
            for output in rebuilt:
                assert output.table is not None
                batches = output.table.to_batches()
                for record_batch in batches:
                    stream.write_batch(record_batch)
                output.handoff = (path, batch_number, len(batches))
                batch_number += len(batches)
                output.table = None

    @staticmethod
    def read(outputs: list[SessionOutput | Reject]) -> None:
        readers: dict[str, pa.ipc.RecordBatchFileReader] = {}
        for output in outputs:
            if not isinstance(output, SessionOutput) or output.handoff is None:
                continue
            path, first, count = output.handoff
            if path not in readers:
                readers[path] = pa.ipc.open_file(pa.memory_map(path))
                os.unlink(path)  # the mapping stays valid; nothing is left behind
            reader = readers[path]
            output.table = pa.Table.from_batches(
                [reader.get_batch(i) for i in range(first, first + count)], schema=SAMPLES_SCHEMA
            )
            output.handoff = None


def rebuild_outputs(
    corpus: Corpus,
    policy: Policy,
    *,
    workers: int = 1,
    batch_bytes: float | None = None,
    spill_dir: str | os.PathLike[str] | None = None,
    pool: ProcessPoolExecutor | None = None,
    count_drift: SessionFacts | None = None,
) -> Iterator[SessionOutput | Reject]:
    """Rebuild every session of ``corpus`` under ``policy``; yield its output or rejection in session-id order.

    ``pool`` (from :func:`early_pool`) runs the batches when it is given and
    there are several; otherwise a pool is started here when needed.
    """
    index = corpus.log.index()
    batches = plan_batches(index, workers, batch_bytes)
    table = corpus.sessions_table
    in_order = _InOrder(index.session_ids, spill_dir)

    def task(batch: ReadBatch, *, in_process: bool = False) -> BatchTask:
        if in_process:
            # Nothing to pickle: the batch looks its sessions up in the whole table, as it goes.
            return BatchTask(corpus.log.turn_files, batch, table.infos, table.invalid, policy, count_drift)
        # A worker receives only its batch's sessions rows.
        sids = [p.session_id for p in batch.sessions]
        infos = {sid: table.infos[sid] for sid in sids if sid in table.infos}
        invalid = {sid: table.invalid[sid] for sid in sids if sid in table.invalid}
        return BatchTask(corpus.log.turn_files, batch, infos, invalid, policy, count_drift)

    try:
        for outputs in _run(batches, task, min(workers, len(batches)), pool):
            for output in outputs:
                yield from in_order.push(output)
        yield from in_order.finish()
    finally:
        in_order.close()


class _TaskMaker(Protocol):
    def __call__(self, batch: ReadBatch, *, in_process: bool = False) -> BatchTask: ...


def _run(
    batches: list[ReadBatch],
    task: _TaskMaker,
    workers: int,
    pool: ProcessPoolExecutor | None = None,
) -> Iterator[list[SessionOutput | Reject]]:
    """Each batch's outputs, in batch order (in-process: one session at a time)."""
    if workers <= 1:
        for batch in batches:
            for output in iter_batch(task(batch, in_process=True)):
                yield [output]
        return
    own_pool = pool is None
    if pool is None:
        pool = new_pool(workers, worker_context())
    pending: deque[Future[list[SessionOutput | Reject]]] = deque()
    todo = iter(batches)
    # Handoff files live only between a worker's write and this process's read (which unlinks
    # them); the folder goes when the run ends, and a killed run's is swept by the next.
    with handoff_folder() as handoff_dir:
        try:
            # Keep every worker busy plus one batch queued; take results in submission order.
            for batch in todo:
                pending.append(pool.submit(_in_worker, task(batch), handoff_dir))
                if len(pending) > workers:
                    break
            while pending:
                outputs = pending.popleft().result()
                next_batch = next(todo, None)
                if next_batch is not None:
                    pending.append(pool.submit(_in_worker, task(next_batch), handoff_dir))
                _Handoff.read(outputs)
                yield outputs
        finally:
            # Batches not started are dropped; those running finish before their handoff folder goes.
            for future in pending:
                future.cancel()
            wait(pending)
            if own_pool:
                pool.shutdown(wait=True)


def _in_worker(task: BatchTask, handoff_dir: str) -> list[SessionOutput | Reject]:
    return rebuild_batch(task, handoff_dir=handoff_dir)


def worker_context() -> multiprocessing.context.BaseContext:
    """How worker processes start.

    A spawned worker imports numpy and pyarrow afresh, about half a second
    before its first row, which is a third of a whole rebuild of the
    benchmark workload; a forked one starts in milliseconds.  Forking a
    process that has threads (numpy's BLAS pool, pyarrow's pools, a progress
    bar) is safe for what a worker does (those libraries reset their pools
    after fork, and a worker prints nothing), but Python 3.12 deprecates it
    with a warning, so from 3.12 on workers come from a fork server, which
    pays the import once per rebuild.
    """
    methods = multiprocessing.get_all_start_methods()
    if sys.version_info < (3, 12) and "fork" in methods:
        return multiprocessing.get_context("fork")
    if "forkserver" in methods:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["tito_cli.run.local"])
        return context
    return multiprocessing.get_context("spawn")  # pragma: no cover - Windows


class _InOrder:
    """Hands out outputs in session-id order, whatever order they arrive in.

    An output that arrives before its turn is parked: its counts stay in
    memory, its sample rows go to an anonymous spill file (Arrow IPC) and are
    read back when its turn comes.  Logs whose sessions finish in id order
    never touch the file.
    """

    def __init__(self, order: Iterable[str], spill_dir: str | os.PathLike[str] | None) -> None:
        # (The index's own list, not a copy: a string a session is all the run keeps of it.)
        self._order = order if isinstance(order, Sequence) else list(order)
        self._next = 0
        self._parked: dict[str, SessionOutput | Reject] = {}
        self._spilled: dict[str, tuple[int, int]] = {}
        self._spill_dir = None if spill_dir is None else Path(spill_dir)
        self._spill: IO[bytes] | None = None

    def push(self, output: SessionOutput | Reject) -> Iterator[SessionOutput | Reject]:
        if self._next < len(self._order) and output.session_id == self._order[self._next]:
            self._next += 1
            yield output
            yield from self._drain()
            return
        if isinstance(output, SessionOutput) and output.table is not None:
            self._park_table(output)
        self._parked[output.session_id] = output

    def finish(self) -> Iterator[SessionOutput | Reject]:
        yield from self._drain()
        if self._parked:  # pragma: no cover - every indexed session produces exactly one output
            raise RuntimeError(f"outputs of sessions not in the index: {sorted(self._parked)[:5]}")

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()
            self._spill = None

    def _drain(self) -> Iterator[SessionOutput | Reject]:
        while self._next < len(self._order) and self._order[self._next] in self._parked:
            output = self._parked.pop(self._order[self._next])
            self._next += 1
            if isinstance(output, SessionOutput) and output.table is None:
                output.table = self._unpark_table(output.session_id)
            yield output

    def _park_table(self, output: SessionOutput) -> None:
        assert output.table is not None
        if self._spill is None:
            # Anonymous (unlinked at once): nothing is left behind, whatever happens.
            self._spill = tempfile.TemporaryFile(prefix=".tito-spill-", dir=self._spill_dir)  # noqa: SIM115
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, output.table.schema) as stream:
            stream.write_table(output.table)
        data = sink.getvalue()
        offset = self._spill.seek(0, os.SEEK_END)
        self._spill.write(data)
        self._spilled[output.session_id] = (offset, data.size)
        output.table = None

    def _unpark_table(self, session_id: str) -> pa.Table:
        assert self._spill is not None
        offset, size = self._spilled.pop(session_id)
        self._spill.seek(offset)
        data = self._spill.read(size)
        return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
