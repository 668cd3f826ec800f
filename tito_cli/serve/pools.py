"""The gateway's worker threads: one for every request's Python work, ``workers`` for the tokenizer's.

The event loop must get the GIL back quickly whenever it wants it; every thread running Python beside
it takes the GIL for up to the interpreter's switch interval each time the loop lets go of it.  So:

* **python** — one thread for the Python work of every request: reading large bodies, checking answers,
  decoding long outputs, building and journaling rows.  More threads would not run it faster (one GIL)
  but would each take the GIL from the loop, and the clients' p99 was higher with four
  (docs/notes/serve-benchmark-2026-12-06c.md).
* **workers** — ``workers`` threads (``--workers``, default 1) for what must not queue with that work
  or wait behind it, marked with :func:`in_workers`: rendering and tokenizing prompts (the tokenizer's
  ``encode_batch_fast`` lets go of the GIL: more threads use more cores), loading the tokenizer (once,
  seconds) and an fsynced journal append (the disk).  Rendering is Python too, so each thread more
  lengthens the loop's lag (``generate`` at 32 sessions: 1x the CPU per turn with one, 2x with two).
* **heavy** — a request whose declared body is over :data:`HEAVY_BYTES` runs all its work here (half
  the workers, at least one): rendering, tokenizing and recording one of several MiB takes seconds, and
  a few such requests must not hold the threads a small request waits for (four 8 MiB requests once
  made a small one wait 27 s).  Which pool follows the request: :func:`mark_request` (called by the
  guard middleware from ``Content-Length``) sets a context variable that the request's tasks inherit.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["HEAVY_BYTES", "Pools", "in_workers", "mark_request"]

#: Request bodies larger than this run their CPU work in the heavy pool.
HEAVY_BYTES = 1 << 20

F = TypeVar("F", bound=Callable[..., Any])

_heavy: contextvars.ContextVar[bool] = contextvars.ContextVar("tito_serve_heavy", default=False)


def mark_request(declared_bytes: int | None) -> None:
    """Say how large the current request's body is (its ``Content-Length``; None when not declared)."""
    _heavy.set(declared_bytes is not None and declared_bytes > HEAVY_BYTES)


def in_workers(fn: F) -> F:
    """Mark ``fn`` to run in the worker threads, not the python thread (a bound method carries the mark)."""
    fn.in_workers = True  # type: ignore[attr-defined]
    return fn


class Pools:
    """One python thread, ``workers`` worker threads, and the heavy pool (half the workers, at least one)."""

    def __init__(self, workers: int) -> None:
        workers = max(1, workers)
        self.python = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tito-serve")
        self.workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tito-serve-worker")
        #: Threads of the heavy pool.
        self.heavy_workers = max(1, workers // 2)
        self.heavy = ThreadPoolExecutor(max_workers=self.heavy_workers, thread_name_prefix="tito-serve-heavy")

    def pool_for(self, fn: Callable[..., Any]) -> ThreadPoolExecutor:
        """Where ``fn`` runs for the current request."""
        if _heavy.get():
            return self.heavy
        return self.workers if getattr(fn, "in_workers", False) else self.python

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in its pool (the event loop only waits)."""
        return await asyncio.get_running_loop().run_in_executor(self.pool_for(fn), fn, *args)

    def shutdown(self) -> None:
        self.heavy.shutdown(wait=True)
        self.workers.shutdown(wait=True)
        self.python.shutdown(wait=True)
