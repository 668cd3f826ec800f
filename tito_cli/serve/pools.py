"""The gateway's worker threads: one pool for ordinary requests, one for requests with huge bodies.

Rendering, tokenizing, (de)serialising and recording a request of several MiB takes seconds; with one
pool, a few such requests held every worker and a small request waited for them (four 8 MiB requests
made a small one wait 27 s).  A request whose declared body is over :data:`HEAVY_BYTES` runs its CPU
work in the heavy pool (half the workers); every other request keeps the whole ordinary pool.  Which
pool a call goes to follows the request: :func:`mark_request` (called by the guard middleware from
``Content-Length``) sets a context variable that the request's tasks inherit.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["HEAVY_BYTES", "Pools", "mark_request"]

#: Request bodies larger than this run their CPU work in the heavy pool.
HEAVY_BYTES = 1 << 20

_heavy: contextvars.ContextVar[bool] = contextvars.ContextVar("tito_serve_heavy", default=False)


def mark_request(declared_bytes: int | None) -> None:
    """Say how large the current request's body is (its ``Content-Length``; None when not declared)."""
    _heavy.set(declared_bytes is not None and declared_bytes > HEAVY_BYTES)


class Pools:
    """The ordinary pool (``workers`` threads) and the heavy pool (half as many, at least one)."""

    def __init__(self, workers: int) -> None:
        workers = max(1, workers)
        self.ordinary = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tito-serve")
        #: Threads of the heavy pool.
        self.heavy_workers = max(1, workers // 2)
        self.heavy = ThreadPoolExecutor(max_workers=self.heavy_workers, thread_name_prefix="tito-serve-heavy")

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the current request's pool (the event loop only waits)."""
        pool = self.heavy if _heavy.get() else self.ordinary
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    def shutdown(self) -> None:
        self.heavy.shutdown(wait=True)
        self.ordinary.shutdown(wait=True)
