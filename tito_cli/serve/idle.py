"""Give freed memory back to the system once the gateway goes idle.

A burst of sessions (a GRPO step's 64 CLIs with 32k-token conversations) parses, serialises and records
hundreds of MB of short-lived objects in the worker threads. glibc keeps what they free in its
per-thread arenas, so without this the gateway's resident memory stays at the burst's high-water mark and
creeps up with every burst (``benchmarks/serve.py`` prints the series). Once nothing has been in flight for
``delay`` seconds — no request answering, no turn being recorded — ``malloc_trim(0)`` hands the free pages
of every arena back. Off glibc (or where it cannot be loaded) this does nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from .._memory import trim_freed_memory, trims_here

__all__ = ["IdleTrim"]


class IdleTrim:
    """Counts work in flight (``enter``/``leave``, on the event loop) and trims after ``delay`` idle seconds."""

    def __init__(self, delay: float, offload: Callable[..., Awaitable[Any]]) -> None:
        self.delay = delay
        self.offload = offload
        self.busy = 0
        self.trims = 0
        self._timer: asyncio.TimerHandle | None = None
        self._running: asyncio.Task[None] | None = None
        self._stopped = False

    def enter(self) -> None:
        self.busy += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def leave(self) -> None:
        self.busy -= 1
        if self.busy == 0 and self.delay > 0 and not self._stopped and trims_here():
            self._timer = asyncio.get_running_loop().call_later(self.delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        if self.busy == 0 and (self._running is None or self._running.done()):
            self._running = asyncio.get_running_loop().create_task(self._trim())

    async def _trim(self) -> None:
        await self.offload(trim_freed_memory)
        self.trims += 1

    async def stop(self) -> None:
        """No trim from now on; one already running (on the offload pool) is awaited, so the pool can shut down."""
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._running is not None:
            await self._running
