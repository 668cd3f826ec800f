"""The gateway's assembly: a Starlette app with its routes, its life (start-up, shutdown) and its parts.

Each generation request is carried by :class:`~.call.Call` (the upstream called, the turn recorded,
then the answer), given the parts this module makes at start-up; each dialect answers its own wire
(its routes, models listing and error bodies); the :class:`~.recorder.Recorder` owns the sessions.
CPU work — rendering, tokenizing, (de)serialising large bodies, recording — runs in a bounded thread
pool; the event loop only waits.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..errors import TokenizerError
from . import debug_metrics
from .call import Call, CallParts
from .config import ServeConfig
from .debug_metrics import LoopLagMonitor
from .dialects import DIALECTS, Dialect, dialect_for
from .exchange import ClientError
from .experts import CallKinds
from .guard import Guard
from .idle import IdleTrim
from .pools import Pools
from .reading import json_body, offload_if, session_of
from .recorder import Recorder
from .sessions import check_session_id
from .template import ChatTemplate
from .transport import Transport
from .upstreams import UPSTREAMS, Upstream
from .upstreams.base import INLINE_BYTES, FailureLog

__all__ = ["Gateway", "create_app"]

log = logging.getLogger("tito.serve")

#: What a finish body may carry.
_FINISH_FIELDS = frozenset({"reward", "metadata", "index", "group_index", "label", "rollout_id"})


def create_app(config: ServeConfig, template: ChatTemplate | None = None) -> Starlette:
    """The gateway as an ASGI app (serve it with uvicorn; its lifespan opens and closes the log).

    ``template``: the tokenizer, already loaded (else the lifespan loads ``config.tokenizer_name``).
    """
    return Gateway(config, template).app


class Gateway:
    """The gateway's parts: the shared upstream client, the worker pool, the recorder, the call kinds."""

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
            sessions=config.live_sessions,
            offload=self.offload,
        )
        self.upstream: Upstream | None = None
        self.call_kinds = CallKinds()
        self.recorder.sessions.on_forget(self.call_kinds.forget)
        #: What each generation call is given (made at start-up, once the upstream is).
        self.parts: CallParts | None = None
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
            self.recorder.sessions.on_forget(self.upstream.session_finished)
            self.parts = CallParts(
                self.upstream, self.recorder, self.call_kinds, self.idle, self.upstream_failures,
                config.public_model_name,
            )  # fmt: skip
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
        dialect = dialect_for(self.dialects, request.url.path, request.headers)
        return JSONResponse(dialect.models(self.config.public_model_name))

    async def _http_error(self, request: Request, exc: HTTPException) -> Response:
        message = f"{request.method} {request.url.path}: {exc.detail}"
        dialect = dialect_for(self.dialects, request.url.path, request.headers)
        return JSONResponse(dialect.error(exc.status_code, message), status_code=exc.status_code)

    def _error(self, dialect: Dialect, exc: ClientError) -> Response:
        return JSONResponse(dialect.error(exc.status, exc.message), status_code=exc.status)

    def _generation_endpoint(self, dialect: Dialect) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                session_id = session_of(request)
                body, data = await json_body(request, self.config.max_request_bytes, self.offload)
                parsed = await offload_if(self.offload, len(data) > INLINE_BYTES, dialect.parse, body)
                parsed.size = len(data)
            except ClientError as exc:
                return self._error(dialect, exc)
            assert self.parts is not None
            return Call(self.parts, dialect, session_id, parsed, request.headers.get("user-agent"))

        return endpoint

    def _count_endpoint(self, dialect: Dialect) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                session_of(request)
                body, data = await json_body(request, self.config.max_request_bytes, self.offload)
                parsed = await offload_if(self.offload, len(data) > INLINE_BYTES, dialect.parse, body)
                assert self.upstream is not None
                tokens = await self.upstream.count_tokens(parsed)
            except ClientError as exc:
                return self._error(dialect, exc)
            return JSONResponse(dialect.count_response(tokens))

        return endpoint

    # -- sessions ------------------------------------------------------------------------------

    async def _finish(self, request: Request) -> Response:
        try:
            session_id = check_session_id(request.path_params["sid"], "the /sessions/{id} path")
            body, _ = await json_body(request, self.config.max_request_bytes, self.offload)
            if not isinstance(body, dict):
                raise ClientError("the finish body must be a JSON object with reward (and metadata, index, ...)")
            unknown = sorted(set(body) - _FINISH_FIELDS)
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
            return self._error(self._session_wire(request), exc)
        return JSONResponse({"session_id": session_id, "finished": True, "reward": reward, "turns": turns})

    async def _report(self, request: Request) -> Response:
        try:
            session_id = check_session_id(request.path_params["sid"], "the /sessions/{id} path")
        except ClientError as exc:
            return self._error(self._session_wire(request), exc)
        await self.recorder.settled(session_id)
        report = self.recorder.report(session_id)
        if report is None:
            message = f"no session {session_id!r} here (no turn of it was ever recorded in this log)"
            return self._error(self._session_wire(request), ClientError(message, 404))
        return JSONResponse(report)

    def _session_wire(self, request: Request) -> Dialect:
        """The dialect of a session route's answers (``/sessions/{id}``, ``/finish``): the default's (OpenAI's)."""
        return dialect_for(self.dialects, request.url.path, ())
