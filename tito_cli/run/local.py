"""The local runner: a log's sessions rebuilt in this process or a pool of workers, in session-id order.

    with LocalRunner(LocalOptions(workers=2)).open(files, "keep", out.parent) as opened:
        for output in opened.outputs(policy, None):
            ...   # SessionOutput (samples as Arrow rows + counts) or Reject, in session-id order

The plan (run/plan.py) cuts the log's index into batches of sessions in *log
order*, the order sessions finish in the files, so that a batch reads few row
groups that another batch also reads.  Each batch is read, routed and
linearized in this process (one worker) or in a pool of worker processes
(run/pool.py); a worker sends back only each session's sample rows and
counts, never the turns or the tree.  Outputs come back in log order and
:class:`~.in_order.InOrder` hands them out in session-id order, parking early
arrivals in a spill file, so memory does not grow with the corpus and the
written file is the same for any number of workers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..algorithm.policy import Policy
from ..read.files import LogFile
from ..read.index import ReadBatch
from ..read.sessions import SessionsTable
from ..turns import Reject
from .corpus import Corpus, SessionFacts, SessionOutput, Unfinished
from .in_order import InOrder
from .plan import BATCHES_PER_WORKER, Plan, default_workers, plan
from .pool import BatchTask, early_pool, file_map, run_batches
from .runner import Runner

__all__ = ["LocalOptions", "LocalRunner", "SessionOutput", "rebuild_outputs"]


@dataclass(frozen=True, slots=True)
class LocalOptions:
    """The local runner's options (``--workers``, ``--batch-mb``)."""

    workers: int | None = field(
        default=None, metadata={"help": "processes rebuilding sessions (default: as many cores as the log can use)"}
    )
    batch_bytes: float | None = field(
        default=None,
        metadata={"help": f"bytes of decoded turn columns a batch (default: {BATCHES_PER_WORKER} batches a worker)"},
    )


class LocalRunner(Runner):
    """This machine's processes: the log opened (by workers too, when it has many files), planned once."""

    name = "local"
    summary = "this machine's processes"
    Options = LocalOptions
    options: LocalOptions

    @contextlib.contextmanager
    def open(self, files: list[Path], unfinished: Unfinished, spill_dir: Path) -> Iterator[_LocalLog]:
        cores = default_workers()
        workers, batch_bytes = self.options.workers, self.options.batch_bytes
        starting = cores if workers is None else workers
        with early_pool(len(files), starting) as pool:
            corpus = Corpus.open(files, map_files=file_map(pool, len(files), starting), unfinished=unfinished)
            # The worker plan, made once: the workers, their batches, and whether a count asked for was lowered.
            chosen = plan(corpus.log.index(), cores, workers, batch_bytes)
            yield _LocalLog(corpus, chosen, pool, spill_dir)


@dataclass(slots=True)
class _LocalLog:
    corpus: Corpus
    plan: Plan
    pool: ProcessPoolExecutor | None
    spill_dir: Path

    @property
    def workers_capped(self) -> tuple[int, int] | None:
        return self.plan.capped

    @property
    def tokenizer(self) -> str | None:
        return self.corpus.tokenizer

    @property
    def sessions_table(self) -> SessionsTable:
        return self.corpus.sessions_table

    @property
    def log_files(self) -> list[LogFile]:
        return self.corpus.log.files

    def session_ids(self) -> Sequence[str]:
        return self.corpus.session_ids()

    def outputs(self, policy: Policy, count_drift: SessionFacts | None) -> Iterator[SessionOutput | Reject]:
        return rebuild_outputs(
            self.corpus, policy, self.plan, spill_dir=self.spill_dir, pool=self.pool, count_drift=count_drift
        )


def rebuild_outputs(
    corpus: Corpus,
    policy: Policy,
    chosen: Plan | None = None,
    *,
    spill_dir: str | os.PathLike[str] | None = None,
    pool: ProcessPoolExecutor | None = None,
    count_drift: SessionFacts | None = None,
) -> Iterator[SessionOutput | Reject]:
    """Rebuild every session of ``corpus`` under ``policy``; yield its output or rejection in session-id order.

    ``chosen``: the plan (:func:`~.plan.plan`; ``None``: one sweep in this process).  ``pool``
    (from :func:`~.pool.early_pool`) runs the batches when it is given and there are several;
    otherwise a pool is started here when needed.
    """
    index = corpus.log.index()
    chosen = chosen or plan(index, 1, 1, None)
    table = corpus.sessions_table
    in_order = InOrder(index.session_ids, spill_dir)

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
        for outputs in run_batches(chosen.batches, task, chosen.workers, pool):
            for output in outputs:
                yield from in_order.push(output)
        yield from in_order.finish()
    finally:
        in_order.close()
