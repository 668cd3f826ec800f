"""One generation call carried from request to answer: the upstream called, the turn recorded, the client answered.

One request = one generation call = at most one turn.  :class:`Call` is given its parts
(:class:`CallParts`: the upstream, the recorder, the call kinds, the idle trimmer, the names a turn
records), never the whole gateway.  While the upstream works a listener waits for the client's
disconnect: a client gone before the upstream answered cancels the call and records nothing.  The turn
is recorded — checked and journaled by the :class:`~.recorder.Recorder` — before the client is
answered, and the client is answered only if that worked: a turn the log cannot hold is a 502, a log
that cannot be written a 503, an upstream error the upstream's status.  Every error leaves in the
request's dialect.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from ..capture.writer import RecordedTurn
from .dialects import Dialect
from .exchange import ChatRequest, ClientError, Generation, UpstreamError
from .experts import CallKinds
from .idle import IdleTrim
from .recorder import Recorder
from .upstreams import Upstream
from .upstreams.base import FailureLog

__all__ = ["Call", "CallParts", "send_json"]

log = logging.getLogger("tito.serve")


@dataclass
class CallParts:
    """What carrying a call takes (made once, when the gateway starts)."""

    upstream: Upstream
    recorder: Recorder
    call_kinds: CallKinds
    idle: IdleTrim
    failures: FailureLog
    #: The model name clients see in each answer.
    model: str

    async def record(
        self, session_id: str, dialect: Dialect, request: ChatRequest, generation: Generation, agent: str | None
    ) -> int:
        """Record the turn of an answer before it is sent (raises ``UpstreamError``/``ClientError`` instead)."""
        metadata: dict[str, Any] = {
            "wire": dialect.name,
            "user_agent": agent,
            "upstream": self.upstream.name,
            "model": request.model,
            **request.notes,
            **generation.notes,
        }
        if generation.upstream_id is not None:
            metadata["upstream_id"] = generation.upstream_id
        turn = RecordedTurn(
            session_id,
            generation.prompt_ids,
            generation.output_ids,
            generation.logprobs,
            generation.finish_reason,
            generation.prompt_messages,
            generation.response_message,
            generation.tools,
            metadata,
            ill_formed=generation.ill_formed,
            weight_versions=generation.weight_versions,
            routed_experts=generation.routed_experts,
            routed_experts_start=generation.routed_experts_start,
            sampling=generation.sampling,
            call_kind=self.call_kinds.decide(session_id, request.messages, request.tools, request.max_tokens),
        )
        summary = {
            "wire": dialect.name,
            "finish_reason": generation.finish_reason,
            "prompt_tokens": len(generation.prompt_ids),
            "output_tokens": len(generation.output_ids),
            "tool_calls": len(generation.tool_calls),
            "ill_formed": generation.ill_formed,
            "call_kind": turn.call_kind,
        }
        seq = await self.recorder.record(session_id, turn, summary)
        self.upstream.recorded(session_id, generation)
        return seq


class Call(Response):  # type: ignore[misc, unused-ignore]  # Response is Any where Starlette is absent
    """The response of one generation request: calls the upstream, records the turn, then answers.

    The request counts as in flight for its session (a finish waits for it) from its start to its end.
    """

    def __init__(
        self, parts: CallParts, dialect: Dialect, session_id: str, request: ChatRequest, agent: str | None
    ) -> None:
        self.parts = parts
        self.dialect = dialect
        self.session_id = session_id
        self.request = request
        self.agent = agent
        # What a Response carries, for anything that inspects one; this one writes its own messages.
        self.status_code = 200
        self.body = b""
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.background = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        gone = asyncio.Event()

        async def listen() -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    gone.set()
                    return

        recorder = self.parts.recorder
        try:
            recorder.begin(self.session_id)
        except ClientError as exc:
            await self._error(send, exc.status, exc.message)
            return
        listener = asyncio.get_running_loop().create_task(listen())
        self.parts.idle.enter()
        try:
            await self._answer(send, gone)
        finally:
            self.parts.idle.leave()
            listener.cancel()
            recorder.end(self.session_id)

    async def _answer(self, send: Send, gone: asyncio.Event) -> None:
        parts, dialect = self.parts, self.dialect
        started = time.perf_counter()
        generation = await self._generate(send, gone)
        if generation is None:
            return
        try:
            await parts.record(self.session_id, dialect, self.request, generation, self.agent)
        except (UpstreamError, ClientError) as exc:
            if isinstance(exc, UpstreamError):  # (a log that cannot be written is said once, by the recorder)
                log.warning("tito serve: session %r: %s", self.session_id, exc.message)
            await self._error(send, exc.status, exc.message)
            return
        if self.request.stream:
            events = dialect.events(self.request, generation, parts.model)
            headers = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-cache")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for event in events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await send_json(send, 200, dialect.response(self.request, generation, parts.model))
        log.debug("tito serve: session %r answered in %.3f s", self.session_id, time.perf_counter() - started)

    async def _generate(self, send: Send, gone: asyncio.Event) -> Generation | None:
        """The upstream's generation; None when the client left first or the error was answered."""
        loop = asyncio.get_running_loop()
        call = loop.create_task(self.parts.upstream.generate(self.request, self.session_id, self.dialect.call_id))
        waiter = loop.create_task(gone.wait())
        await asyncio.wait({call, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not call.done():
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            log.info("tito serve: session %r: the client left before its answer; no turn", self.session_id)
            return None
        waiter.cancel()
        try:
            generation = call.result()
        except (UpstreamError, ClientError) as exc:
            self.parts.failures.failed(self.session_id, exc)
            await self._error(send, exc.status, exc.message)
            return None
        except Exception:
            log.exception("tito serve: session %r: the request failed", self.session_id)
            await self._error(send, 500, "the gateway failed on this request (its log says why)")
            return None
        if gone.is_set():
            log.info("tito serve: session %r: the client left before its answer; no turn", self.session_id)
            return None
        return generation

    async def _error(self, send: Send, status: int, message: str) -> None:
        await send_json(send, status, self.dialect.error(status, message))


async def send_json(send: Send, status: int, body: Any) -> None:
    """A whole JSON answer on ``send``."""
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "backslashreplace")
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
