"""The upstream failures the gateway logs: one line each, at most a burst a window (an upstream that is down
cannot flood stderr)."""

from __future__ import annotations

import logging
import math
import time

from ..exchange import UpstreamError

__all__ = ["FailureLog"]

log = logging.getLogger("tito.serve")


class FailureLog:
    """One warning line per upstream failure, at most ``burst`` a ``window`` seconds (then one line saying how
    many were left out): an upstream that is down cannot flood the gateway's stderr."""

    def __init__(self, burst: int = 10, window: float = 10.0) -> None:
        self.burst = burst
        self.window = window
        self._start = -math.inf
        self._count = 0
        self._dropped = 0

    def failed(self, session_id: str, error: Exception) -> bool:
        """Log ``error`` (session ``session_id``) unless the window's lines are spent; whether a line was written.

        Only an :class:`UpstreamError` is the upstream's failure (a client's error is not logged here).
        """
        if not isinstance(error, UpstreamError):
            return False
        now = time.monotonic()
        if now - self._start >= self.window:
            if self._dropped:
                log.warning(
                    "tito serve: %d more upstream failures in the last %g s were not logged", self._dropped, self.window
                )
            self._start, self._count, self._dropped = now, 0, 0
        if self._count >= self.burst:
            self._dropped += 1
            return False
        self._count += 1
        detail = f" [{error.detail}]" if error.detail else ""
        log.warning(
            "tito serve: session %r: upstream failure (%d): %s%s", session_id, error.status, error.message, detail
        )
        return True
