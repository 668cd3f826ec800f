"""The local runner: a log's sessions rebuilt in this process or a pool of workers, in session-id order.

    for output in rebuild_outputs(corpus, policy, plan(index, cores, asked, None), spill_dir=out.parent):
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

import os
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

from ..algorithm.policy import Policy
from ..read.rows import ReadBatch
from .corpus import Corpus, Reject, SessionFacts, SessionOutput
from .in_order import InOrder
from .plan import Plan, plan
from .pool import BatchTask, run_batches

__all__ = ["SessionOutput", "rebuild_outputs"]


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
