"""Worker processes: started early (to open a log's many files), fed batches, results taken in order.

A batch's task (:class:`BatchTask`) is everything a worker needs, pickled;
the worker reads, validates, routes and linearizes its sessions
(:func:`iter_batch`) and streams their sample rows, session by session, into a
handoff file (run/handoff.py), sending their counts through the pipe.
:func:`run_batches` keeps every worker busy plus one batch queued and yields
each batch's outputs in batch order, reading each session's rows back when
it is handed on.  Every pool comes from :func:`tito_cli.run.lifetime.new_pool`:
its workers die with the process that started them.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import sys
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Protocol

from ..algorithm.policy import Policy
from ..read.files import LogFile
from ..read.index import ReadBatch
from ..read.index_pass import FileMap
from ..read.rows import read_batch
from ..turns import Reject, RowRef, SessionInfo
from .corpus import SessionFacts, SessionOutput, session_output
from .handoff import Handoff
from .lifetime import handoff_folder, new_pool

__all__ = [
    "OPEN_FILES_PER_WORKER",
    "BatchTask",
    "TaskMaker",
    "early_pool",
    "file_map",
    "iter_batch",
    "rebuild_batch",
    "run_batches",
    "worker_context",
]


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
    in-process) for :func:`file_map` and then :func:`run_batches`; it is
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

    With ``handoff_dir``, each session's sample rows go to a file there as soon as it is
    rebuilt (see :class:`~.handoff.Handoff`) and its output's ``table`` is left ``None``:
    the list holds the batch's counts, not its rows.
    """
    if handoff_dir is None:
        return list(iter_batch(task))
    return Handoff.write(iter_batch(task), handoff_dir)


class TaskMaker(Protocol):
    def __call__(self, batch: ReadBatch, *, in_process: bool = False) -> BatchTask: ...


def run_batches(
    batches: list[ReadBatch],
    task: TaskMaker,
    workers: int,
    pool: ProcessPoolExecutor | None = None,
) -> Iterator[Iterable[SessionOutput | Reject]]:
    """Each batch's outputs, in batch order (in-process: one session at a time).

    A batch from a worker is an iterator reading each session's rows from its handoff file as it
    goes: consume it before asking for the next batch."""
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
                yield Handoff.read(outputs)
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
        context.set_forkserver_preload(["tito_cli.run.pool"])
        return context
    return multiprocessing.get_context("spawn")  # pragma: no cover - Windows
