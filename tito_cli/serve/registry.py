"""The gateway's one session registry: which sessions are in flight, and one memory bound for all the rest.

Several parts of the gateway hold something per session — the recorder's summaries (``GET
/sessions/{id}``), the writer's next ``seq`` and delta bases, the call kinds' main lines, an upstream's
history and experts ledger.  None of them bounds its sessions by itself: each registers a *forget hook*
here, and the registry keeps at most ``limit`` sessions, forgetting the least recently used one that has
no request in flight (every hook called with its id) when a session beyond the limit is touched.  A
session with requests in flight is never forgotten, so the count exceeds ``limit`` only by those.

Forgetting costs nothing that is recorded: the log's index (:class:`~.recovery.Known`: each session's
next ``seq``, the finished ones) is kept whole, so a forgotten session's next turn continues its ``seq``;
only what speeds a session up is dropped (its next prompt is rendered whole, its next row stored whole).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["DEFAULT_LIVE_SESSIONS", "SessionRegistry"]

#: Sessions whose per-session state the gateway keeps (``--live-sessions``).
DEFAULT_LIVE_SESSIONS = 4096

#: Called with a session id the registry forgets.
ForgetHook = Callable[[str], None]


class SessionRegistry:
    """At most ``limit`` sessions held (in flight ones aside); see the module's docstring."""

    def __init__(self, limit: int = DEFAULT_LIVE_SESSIONS) -> None:
        if limit < 1:
            raise ValueError("the session limit must be at least 1")
        self.limit = limit
        self._held: OrderedDict[str, None] = OrderedDict()
        self._inflight: dict[str, int] = {}
        self._quiet: dict[str, asyncio.Event] = {}
        self._hooks: list[ForgetHook] = []

    def on_forget(self, hook: ForgetHook) -> None:
        """Call ``hook(session_id)`` for every session the registry forgets (from the event loop's thread)."""
        self._hooks.append(hook)

    def touch(self, session_id: str) -> None:
        """The session is used now: the most recent, then the least recent idle ones beyond the limit forgotten."""
        self._held[session_id] = None
        self._held.move_to_end(session_id)
        self._bound()

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._held

    def __len__(self) -> int:
        return len(self._held)

    # -- requests in flight ------------------------------------------------------------------

    def enter(self, session_id: str) -> None:
        """A request of ``session_id`` starts (the session is then never forgotten until it ends)."""
        self._inflight[session_id] = self._inflight.get(session_id, 0) + 1
        self.touch(session_id)

    def leave(self, session_id: str) -> None:
        left = self._inflight[session_id] - 1
        if left:
            self._inflight[session_id] = left
            return
        del self._inflight[session_id]
        quiet = self._quiet.pop(session_id, None)
        if quiet is not None:
            quiet.set()
        self._bound()

    def busy(self, session_id: str) -> bool:
        return bool(self._inflight.get(session_id))

    async def quiet(self, session_id: str) -> None:
        """Wait until the session has no request in flight."""
        while self._inflight.get(session_id):
            await self._quiet.setdefault(session_id, asyncio.Event()).wait()

    # -- the bound -----------------------------------------------------------------------------

    def _bound(self) -> None:
        excess = len(self._held) - self.limit
        if excess <= 0:
            return
        # The oldest ``excess`` idle sessions lie among the first ``excess`` + in-flight ones: only those are
        # looked at (every request touches a session, so a full registry must not be walked each time).
        oldest = list(itertools.islice(self._held, excess + len(self._inflight)))
        for session_id in [sid for sid in oldest if sid not in self._inflight][:excess]:
            self.forget(session_id)

    def forget(self, session_id: str) -> None:
        """Forget the session everywhere (every hook), in flight or not."""
        self._held.pop(session_id, None)
        for hook in self._hooks:
            hook(session_id)
