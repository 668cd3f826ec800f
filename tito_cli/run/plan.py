"""The worker plan: how many processes rebuild a log, and the batches of sessions they get.

    p = plan(log.index(), cores=default_workers(), asked=None, batch_bytes=None)
    p.workers, p.batches, p.capped      # computed once, before any worker runs

The cost model: a rebuild's work is its decoded turn columns plus a share a
turn (:func:`work_bytes`); a small log is rebuilt in-process; batches are cut
in log order so that few of them decode a row group another also decodes
(:func:`plan_batches`), never more than :data:`MAX_DECODE_OVERHEAD` times the
log in all, and the workers are at most that many batches (:func:`workers_for`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..read.index import LogIndex, ReadBatch

__all__ = [
    "BATCHES_PER_WORKER",
    "MAX_BATCH_BYTES",
    "MAX_DECODE_OVERHEAD",
    "MIN_PARALLEL_BYTES",
    "TURN_WORK_BYTES",
    "Plan",
    "decoded_bytes",
    "default_workers",
    "plan",
    "plan_batches",
    "work_bytes",
    "worker_cap",
    "workers_for",
]


@dataclass(frozen=True, slots=True)
class Plan:
    """Who rebuilds what: ``workers`` processes (1: in this process) and the batches, in log order."""

    workers: int
    batches: list[ReadBatch]
    #: ``(asked, used)`` when an explicit worker count was lowered (:func:`worker_cap`).
    capped: tuple[int, int] | None = None


def plan(index: LogIndex, cores: int, asked: int | None, batch_bytes: float | None) -> Plan:
    """The plan for a log: ``asked`` workers (``None``: as many of ``cores`` as the log's layout can use
    without decoding its row groups twice), lowered the same way unless ``batch_bytes`` sets the
    batches' size; batches cut by :func:`plan_batches`."""
    capped: tuple[int, int] | None = None
    if asked is None:
        # Not told: as many of the cores as the log's layout lets work without decoding it twice.
        workers = workers_for(index, cores)
    else:
        workers = asked
        if batch_bytes is None and workers > 1:
            # Told: still never more than the batches can use without decoding the log several times.
            usable = worker_cap(index, workers)
            if usable is not None:
                capped, workers = (workers, usable), usable
    batches = plan_batches(index, workers, batch_bytes)
    return Plan(min(workers, len(batches)) if batches else 1, batches, capped)


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
#: reaches it).  What a worker holds does not depend on it (sample rows go to
#: the handoff file session by session, run/handoff.py); it bounds what waits
#: there on disk: the rows of at most workers + 1 batches.
MAX_BATCH_BYTES = 512 << 20


#: Batches per worker: more keep every core busy to the end (a batch runs on one
#: core, and the last one to finish runs alone: half a batch of idle core on
#: average); cuts fall between sessions that share no row group
#: (LogIndex.batches), so more batches cost little re-reading.
BATCHES_PER_WORKER = 8

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
    return index.nbytes + TURN_WORK_BYTES * len(index.log_rows)


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
