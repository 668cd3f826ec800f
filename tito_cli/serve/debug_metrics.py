"""Opt-in measurements of a running gateway: event-loop lag, CPU time and resident memory.

Off unless ``TITO_SERVE_DEBUG_METRICS=1`` is in the gateway's environment; then ``GET /debug/metrics``
answers a JSON object (``?reset=1`` also starts a new lag window) for ``benchmarks/serve.py``:

* ``loop_lag``: a task sleeps ``interval`` seconds in a loop and records how much later than asked it
  woke up (the time the loop spent running something else): ``samples``, ``p50_ms``, ``p99_ms``,
  ``max_ms`` over the window.
* ``cpu_seconds``: the process's user + system CPU time so far (every thread: tokenizer workers too).
* ``rss_bytes``: the resident set size now (``/proc/self/statm``; ``null`` where there is none).
* ``event_loop``: the running loop's class (``uvloop.Loop`` when uvloop is installed); ``switch_interval_ms``:
  the interpreter's switch interval (``tito serve`` sets it: ``run.py``).
* ``idle_trims``: how many times freed memory went back to the system after the gateway went idle
  (``tito_cli/serve/idle.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

__all__ = ["ENV", "LoopLagMonitor", "enabled", "rss_bytes"]

#: The environment variable that turns the metrics on.
ENV = "TITO_SERVE_DEBUG_METRICS"

#: How often the lag probe wakes up (seconds); each wake-up is one sample.
INTERVAL = 0.005
#: Samples kept per window (a ring: the newest are kept): ten minutes at the interval above.
MAX_SAMPLES = 120_000


def enabled() -> bool:
    return os.environ.get(ENV, "") not in ("", "0")


def rss_bytes() -> int | None:
    """The process's resident set size now, or None off Linux."""
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            pages = int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


class LoopLagMonitor:
    """A task on the running loop that measures how late its own wake-ups are."""

    def __init__(self, interval: float = INTERVAL) -> None:
        self.interval = interval
        self._lags: list[float] = []
        self._next = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(self.interval)
            self._record(time.perf_counter() - asked - self.interval)

    def _record(self, lag: float) -> None:
        lag = max(lag, 0.0)
        if len(self._lags) < MAX_SAMPLES:
            self._lags.append(lag)
        else:
            self._lags[self._next] = lag
            self._next = (self._next + 1) % MAX_SAMPLES

    def reset(self) -> None:
        self._lags = []
        self._next = 0

    def snapshot(self) -> dict[str, Any]:
        lags = sorted(self._lags)
        loop = asyncio.get_running_loop()

        def quantile(q: float) -> float | None:
            if not lags:
                return None
            return round(lags[min(len(lags) - 1, int(q * len(lags)))] * 1000, 3)

        return {
            "loop_lag": {
                "samples": len(lags),
                "interval_ms": self.interval * 1000,
                "p50_ms": quantile(0.50),
                "p99_ms": quantile(0.99),
                "max_ms": round(lags[-1] * 1000, 3) if lags else None,
            },
            "cpu_seconds": time.process_time(),
            "rss_bytes": rss_bytes(),
            "event_loop": f"{type(loop).__module__}.{type(loop).__qualname__}",
            "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),
        }
