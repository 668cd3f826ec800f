"""The gateway: a Starlette app that answers each dialect, calls the upstream, and records turns.

One request = one generation call = at most one turn.  The turn is recorded — checked and appended
to the write-ahead journal by the :class:`~tito_cli.serve.recorder.Recorder` — before the client is
answered, and the client is answered only if that worked: a turn the log cannot hold is a 502, a log
that cannot be written a 503 (a client gone before its answer came from the upstream, or an upstream
error, records nothing).  The turns of one session are recorded in the order their answers came
(each after the session's previous one), so ``seq`` follows the conversation.  CPU work — rendering,
tokenizing, (de)serialising large bodies, recording — runs in a bounded thread pool; the event loop
only waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..capture.writer import RecordedTurn
from ..errors import TokenizerError
from . import debug_metrics
from .config import ServeConfig
from .debug_metrics import LoopLagMonitor
from .dialects import DIALECTS, Dialect
from .dialects.chat import openai_error
from .exchange import ChatRequest, ClientError, Generation, UpstreamError
from .experts import CallKinds
from .guard import Guard, client_json
from .idle import IdleTrim
from .pools import Pools
from .recorder import Recorder
from .sessions import check_session_id, session_from_headers
from .template import ChatTemplate
from .transport import Transport
from .upstreams import UPSTREAMS, Upstream
from .upstreams.base import INLINE_BYTES, FailureLog

__all__ = ["Gateway", "create_app"]

log = logging.getLogger("tito.serve")


def create_app(config: ServeConfig, template: ChatTemplate | None = None) -> Starlette:
    """The gateway as an ASGI app (serve it with uvicorn; its lifespan opens and closes the log).

    ``template``: the tokenizer, already loaded (else the lifespan loads ``config.tokenizer_name``).
    """
    return Gateway(config, template).app


class Gateway:
    """The gateway's state: the shared upstream client, the worker pool, the recorder."""

    def __init__(self, config: ServeConfig, template: ChatTemplate | None = None) -> None:
        self.config = config
        self.upstream_class = UPSTREAMS.get(config.upstream_api)
        self.dialects: list[Dialect] = [DIALECTS.get(name)() for name in DIALECTS.names()]
        self._template: ChatTemplate | None = template
        self._template_error: str | None = None
        self._template_lock = threading.Lock()
        self.pool: Pools | None = None
        self.upstream_failures = FailureLog()
        self.idle = IdleTrim(config.idle_trim, self.offload)
        self.recorder = Recorder(
            config.logs,
            tokenizer=config.tokenizer_name,
            flush_every=config.flush_every,
            fsync=config.fsync,
            offload=self.offload,
        )
        self.upstream: Upstream | None = None
        self.call_kinds = CallKinds()
        #: Opt-in measurements (TITO_SERVE_DEBUG_METRICS=1): the loop's lag, CPU, RSS at GET /debug/metrics.
        self.metrics = LoopLagMonitor() if debug_metrics.enabled() else None
        guard = Middleware(Guard, host=config.host, port=config.port, allow_origins=config.allow_origins,
                           dialects=self.dialects)  # fmt: skip
        self.app = Starlette(routes=self._routes(), lifespan=self._lifespan, middleware=[guard])
        self.app.add_exception_handler(HTTPException, self._http_error)  # type: ignore[arg-type, unused-ignore]

    # -- life --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _lifespan(self, app: Starlette) -> AsyncIterator[None]:
        config = self.config
        self.pool = Pools(config.workers)
        client = Transport(config)
        try:
            await self._load_template()
            self.upstream = self.upstream_class(config, client, self.template, self.offload)
            if self.upstream.renders and hasattr(self.upstream, "profile"):
                self.upstream.profile()
            await self.offload(self.recorder.open)  # (done already when run by tito serve)
            self.recorder.start()
            if self.metrics is not None:
                self.metrics.start()
            yield
        finally:
            if self.metrics is not None:
                await self.metrics.stop()
            await self.recorder.close()
            await self.idle.stop()
            await client.close()
            self.pool.shutdown()

    async def _load_template(self) -> None:
        if self._template is not None:
            return
        name = self.config.tokenizer_name
        if name is None:
            if self.upstream_class.renders:
                raise TokenizerError(f"--upstream-api {self.upstream_class.name} needs --tokenizer (or --model)")
            self._template_error = "the gateway was started without --tokenizer"
            return
        if self.upstream_class.renders:
            self._template = await self.offload(ChatTemplate.configured, self.config)
        # Any other upstream renders itself: only count_tokens and the answers' id check need the tokenizer,
        # loaded on first use.

    def template(self) -> ChatTemplate:
        """The tokenizer: loaded at start when the upstream renders, else on first use (call it off the loop)."""
        if self._template is None and self._template_error is None and self.config.tokenizer_name:
            with self._template_lock:  # the first count_tokens loads it (in a worker thread), once
                if self._template is None and self._template_error is None:
                    try:
                        self._template = ChatTemplate.configured(self.config)
                    except TokenizerError as exc:
                        self._template_error = "the gateway could not load its tokenizer (its log says why)"
                        log.warning("tito serve: no tokenizer for count_tokens: %s", exc)
        if self._template is None:
            raise ClientError(f"counting tokens needs the tokenizer: {self._template_error}", 501)
        return self._template

    async def offload(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` in the worker pool (the event loop only waits)."""
        assert self.pool is not None
        return await self.pool.run(fn, *args)

    # -- routes ------------------------------------------------------------------------------

    def _routes(self) -> list[Route]:
        routes = [
            Route("/healthz", self._health, methods=["GET"]),
            Route("/v1/models", self._models, methods=["GET"]),
            Route("/sessions/{sid}/v1/models", self._models, methods=["GET"]),
            Route("/sessions/{sid}/finish", self._finish, methods=["POST"]),
            Route("/sessions/{sid}", self._report, methods=["GET"]),
        ]
        if self.metrics is not None:
            routes.append(Route("/debug/metrics", self._debug_metrics, methods=["GET"]))
        for dialect in self.dialects:
            for prefix in ("", "/sessions/{sid}"):
                routes.append(Route(prefix + dialect.path, self._generation_endpoint(dialect), methods=["POST"]))
                if dialect.count_path:
                    routes.append(Route(prefix + dialect.count_path, self._count_endpoint(dialect), methods=["POST"]))
        return routes

    async def _debug_metrics(self, request: Request) -> Response:
        assert self.metrics is not None
        snapshot = {**self.metrics.snapshot(), "idle_trims": self.idle.trims}
        if request.query_params.get("reset") == "1":
            self.metrics.reset()
        return JSONResponse(snapshot)

    async def _health(self, request: Request) -> Response:
        problem = self.recorder.problem()
        if problem is not None:
            return JSONResponse({"status": "failing", "reason": f"the turn log cannot be written: {problem}"}, 503)
        return JSONResponse({"status": "ok"})

    async def _models(self, request: Request) -> Response:
        name = self.config.public_model_name
        if "anthropic-version" in request.headers:
            model = {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
            return JSONResponse({"data": [model], "has_more": False, "first_id": name, "last_id": name})
        return JSONResponse(
            {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tito"}]}
        )

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        dialect = self._dialect_named("anthropic") if "anthropic-version" in request.headers else None
        body = dialect.error(exc.status_code, message) if dialect else openai_error(exc.status_code, message)
        return JSONResponse(body, status_code=exc.status_code)

    def _dialect_named(self, name: str) -> Dialect | None:
        return next((d for d in self.dialects if d.name == name), None)

    def _generation_endpoint(self, dialect: Dialect) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                session_id = self._session_of(request)
                body = await self._json_body(request)
                parsed = await self._offload_if(len(body[1]) > INLINE_BYTES, dialect.parse, body[0])
                parsed.size = len(body[1])
            except ClientError as exc:
                return JSONResponse(dialect.error(exc.status, exc.message), status_code=exc.status)
            return _Exchange(self, dialect, session_id, parsed, request.headers.get("user-agent"))

        return endpoint

    def _count_endpoint(self, dialect: Dialect) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                self._session_of(request)
                body = await self._json_body(request)
                parsed = await self._offload_if(len(body[1]) > INLINE_BYTES, dialect.parse, body[0])
                assert self.upstream is not None
                tokens = await self.upstream.count_tokens(parsed)
            except ClientError as exc:
                return JSONResponse(dialect.error(exc.status, exc.message), status_code=exc.status)
            return JSONResponse(dialect.count_response(tokens))

        return endpoint

    async def _offload_if(self, heavy: bool, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.offload(fn, *args) if heavy else fn(*args)

    def _session_of(self, request: Request) -> str:
        sid = request.path_params.get("sid")
        if sid is not None:
            return check_session_id(sid, "the /sessions/{id} path")
        return session_from_headers(request.headers)

    async def _json_body(self, request: Request) -> tuple[Any, bytes]:
        """The parsed JSON body and its bytes; 413 beyond the limit, 400 for what is not JSON."""
        limit = self.config.max_request_bytes
        declared = request.headers.get("content-length")
        too_big = declared is not None and declared.isdigit() and int(declared) > limit
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                too_big = True
            if not too_big:
                chunks.append(chunk)
            elif size > 4 * limit + len(chunk):
                break  # read (and dropped) enough to answer; the connection is closed after the 413
        if too_big:
            raise ClientError(f"the request body is larger than {limit} bytes (--max-request-bytes)", 413)
        data = b"".join(chunks)
        try:
            parsed = await self._offload_if(len(data) > INLINE_BYTES, client_json, data)
        except RecursionError:
            raise ClientError("the request body is nested too deeply") from None
        return parsed, data

    # -- sessions ------------------------------------------------------------------------------

    async def _finish(self, request: Request) -> Response:
        try:
            session_id = check_session_id(request.path_params["sid"], "the /sessions/{id} path")
            body, _ = await self._json_body(request)
            if not isinstance(body, dict):
                raise ClientError("the finish body must be a JSON object with reward (and metadata, index, ...)")
            unknown = sorted(set(body) - {"reward", "metadata", "index", "group_index", "label", "rollout_id"})
            if unknown:
                raise ClientError(f"unknown field(s) in the finish body: {', '.join(unknown)}")
            reward = body.get("reward")
            if reward is not None and (
                isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward)
            ):
                raise ClientError("reward must be a finite number or null")
            turns = await self.recorder.finish(session_id, None if reward is None else float(reward), body)
            self.call_kinds.forget(session_id)
            if self.upstream is not None:
                self.upstream.session_finished(session_id)
        except ClientError as exc:
            return JSONResponse(openai_error(exc.status, exc.message), status_code=exc.status)
        return JSONResponse({"session_id": session_id, "finished": True, "reward": reward, "turns": turns})

    async def _report(self, request: Request) -> Response:
        try:
            session_id = check_session_id(request.path_params["sid"], "the /sessions/{id} path")
        except ClientError as exc:
            return JSONResponse(openai_error(exc.status, exc.message), status_code=exc.status)
        await self.recorder.settled(session_id)
        report = self.recorder.report(session_id)
        if report is None:
            message = f"no session {session_id!r} here (no turn of it was ever recorded in this log)"
            return JSONResponse(openai_error(404, message), status_code=404)
        return JSONResponse(report)

    # -- recording -------------------------------------------------------------------------------

    async def record(
        self, session_id: str, dialect: Dialect, request: ChatRequest, generation: Generation, agent: str | None
    ) -> int:
        """Record the turn of an answer before it is sent (raises ``UpstreamError``/``ClientError`` instead)."""
        metadata: dict[str, Any] = {
            "wire": dialect.name,
            "user_agent": agent,
            "upstream": self.upstream_class.name,
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
        if self.upstream is not None:
            self.upstream.recorded(session_id, generation)
        return seq


class _Exchange(Response):  # type: ignore[misc, unused-ignore]  # Response is Any where Starlette is absent
    """The response of one generation request: calls the upstream, records the turn, then answers.

    While the upstream works, a listener waits for the client's disconnect: a client gone before
    the upstream answered cancels the upstream call and records nothing.  The request counts as in
    flight for its session (a finish waits for it) from its start to its end.
    """

    def __init__(
        self, gateway: Gateway, dialect: Dialect, session_id: str, request: ChatRequest, agent: str | None
    ) -> None:
        self.gateway = gateway
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

        recorder = self.gateway.recorder
        try:
            recorder.begin(self.session_id)
        except ClientError as exc:
            await _send_json(send, exc.status, self.dialect.error(exc.status, exc.message))
            return
        listener = asyncio.get_running_loop().create_task(listen())
        self.gateway.idle.enter()
        try:
            await self._answer(send, gone)
        finally:
            self.gateway.idle.leave()
            listener.cancel()
            recorder.end(self.session_id)

    async def _answer(self, send: Send, gone: asyncio.Event) -> None:
        gateway, dialect = self.gateway, self.dialect
        assert gateway.upstream is not None
        started = time.perf_counter()
        call = asyncio.get_running_loop().create_task(
            gateway.upstream.generate(self.request, self.session_id, dialect.call_id)
        )
        waiter = asyncio.get_running_loop().create_task(gone.wait())
        await asyncio.wait({call, waiter}, return_when=asyncio.FIRST_COMPLETED)
        if not call.done():
            call.cancel()
            with contextlib.suppress(BaseException):
                await call
            log.info("tito serve: session %r: the client left before its answer; no turn", self.session_id)
            return
        waiter.cancel()
        try:
            generation = call.result()
        except (UpstreamError, ClientError) as exc:
            gateway.upstream_failures.failed(self.session_id, exc)
            await _send_json(send, exc.status, dialect.error(exc.status, exc.message))
            return
        except Exception:
            log.exception("tito serve: session %r: the request failed", self.session_id)
            await _send_json(send, 500, dialect.error(500, "the gateway failed on this request (its log says why)"))
            return
        if gone.is_set():
            log.info("tito serve: session %r: the client left before its answer; no turn", self.session_id)
            return
        try:
            await gateway.record(self.session_id, dialect, self.request, generation, self.agent)
        except (UpstreamError, ClientError) as exc:
            if isinstance(exc, UpstreamError):  # (a log that cannot be written is said once, by the recorder)
                log.warning("tito serve: session %r: %s", self.session_id, exc.message)
            await _send_json(send, exc.status, dialect.error(exc.status, exc.message))
            return
        model = gateway.config.public_model_name
        if self.request.stream:
            events = dialect.events(self.request, generation, model)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                    ],
                }
            )
            for event in events:
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        else:
            await _send_json(send, 200, dialect.response(self.request, generation, model))
        log.debug("tito serve: session %r answered in %.3f s", self.session_id, time.perf_counter() - started)


async def _send_json(send: Send, status: int, body: Any) -> None:
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "backslashreplace")
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": data, "more_body": False})
