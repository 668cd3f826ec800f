"""Client connections a slow or hostile peer cannot pile up: a header deadline and a connection limit.

uvicorn closes a keep-alive connection that stays idle after a response (``timeout_keep_alive``), but
a connection that never sends a request — or sends its head a byte at a time — is held forever, and
with enough of them the process runs out of file descriptors (uvicorn's accept loop then logs a
traceback per attempt).  The protocol here, uvicorn's own HTTP protocol underneath, adds:

* **a header deadline**: a request's head (request line and headers) must arrive within
  ``--client-header-timeout`` seconds of the connection opening, or of its first byte after an
  answer; otherwise the connection is closed;
* **a connection limit**: beyond ``--max-client-connections`` open connections, the one idle longest
  (no request in flight) is closed to make room — an agent's new connection is served, a pile of idle
  sockets is what gives way; when every connection has a request in flight, the new one is closed.
  One warning line says so (at most one every 10 s, with the count since).

The soft limit on open files is raised (to the hard limit) when the connection limit and the upstream
pool would not fit under it.
"""

from __future__ import annotations

import asyncio
import logging
import resource
import time
from typing import Any

from .config import ServeConfig

__all__ = ["protocol_class", "raise_open_files_limit"]

log = logging.getLogger("tito.serve")

#: File descriptors beyond the client and upstream connections (the log, the tokenizer, the loop).
_SPARE_FILES = 128


def raise_open_files_limit(config: ServeConfig) -> None:
    """Raise the soft ``RLIMIT_NOFILE`` so the connection limits fit under it (a warning where they cannot)."""
    needed = config.max_client_connections + config.max_connections + _SPARE_FILES
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            target = soft
        if target < needed:
            log.warning(
                "tito serve: the open-files limit (%d) is below --max-client-connections %d + the upstream pool %d; "
                "lower --max-client-connections or raise ulimit -n",
                target,
                config.max_client_connections,
                config.max_connections,
            )


class _Throttled:
    """At most one warning line a ``window`` seconds; the lines left out are counted into the next one."""

    def __init__(self, window: float = 10.0) -> None:
        self.window = window
        self._last = -float("inf")
        self._left_out = 0

    def warn(self, message: str, *args: Any) -> None:
        now = time.monotonic()
        if now - self._last < self.window:
            self._left_out += 1
            return
        suffix = f" ({self._left_out} more since the last line)" if self._left_out else ""
        self._last, self._left_out = now, 0
        log.warning(message + suffix, *args)


def protocol_class(config: ServeConfig) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol with the header deadline and the connection limit of ``config`` (uvicorn's ``http``)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    header_timeout = config.client_header_timeout
    limit = config.max_client_connections
    throttled = _Throttled()

    class GuardedProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type, unused-ignore]
        _deadline: asyncio.TimerHandle | None = None
        _armed_for: Any = None
        last_active = 0.0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self.last_active = time.monotonic()
            self._arm()
            if len(self.connections) > limit:
                self._make_room()

        def data_received(self, data: bytes) -> None:
            self.last_active = time.monotonic()
            super().data_received(data)
            if self._deadline is not None:
                if self.cycle is not self._armed_for:  # the head arrived: a request is under way
                    self._disarm()
            elif self.cycle is None or self.cycle.response_complete:
                self._arm()  # the first bytes of the next request's head after an answer

        def on_response_complete(self) -> None:
            self.last_active = time.monotonic()
            super().on_response_complete()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def idle(self) -> bool:
            return self.cycle is None or bool(self.cycle.response_complete)

        def _arm(self) -> None:
            self._disarm()
            self._armed_for = self.cycle
            self._deadline = self.loop.call_later(header_timeout, self._too_slow)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _too_slow(self) -> None:
            self._deadline = None
            if not self.transport.is_closing():
                log.debug("tito serve: closed a client connection that sent no request head in %g s", header_timeout)
                self.transport.close()

        def _make_room(self) -> None:
            idle = [c for c in self.connections if c is not self and not c.transport.is_closing() and c.idle()]
            if idle:
                victim = min(idle, key=lambda c: c.last_active)
                throttled.warn(
                    "tito serve: %d client connections (--max-client-connections %d): closed the one idle longest",
                    len(self.connections),
                    limit,
                )
                victim.transport.close()
            else:
                throttled.warn(
                    "tito serve: %d client connections, each with a request in flight (--max-client-connections "
                    "%d): refused a new one",
                    len(self.connections),
                    limit,
                )
                self.transport.close()

    return GuardedProtocol
