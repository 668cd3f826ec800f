"""Running the gateway: checks that fail before the server starts, then uvicorn until SIGTERM/SIGINT.

Start-up fails before anything is created in the log folder for a bad option or a tokenizer that
cannot be found (``ValueError``/``TokenizerError``: usage, exit 2) and for a port it cannot listen
on (``ValueError``); then the log folder is opened (dead gateways' journals adopted, the session
registry built; ``OutputError``, exit 5, for a folder that cannot be written).

uvicorn owns the signals: on SIGTERM or SIGINT it stops accepting, lets in-flight requests finish
for ``grace_period`` seconds, then runs the app's shutdown, which writes every journaled turn as
Parquet and closes the log; turns it could not write are an ``OutputError`` (exit 5) after the
server stopped (they stay in the journal, for the next gateway on the folder).
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from typing import Any

from ..errors import OutputError, TokenizerError
from .app import Gateway
from .config import ServeConfig
from .connections import protocol_class, raise_open_files_limit
from .template import ChatTemplate
from .upstreams import UPSTREAMS

__all__ = ["prepare", "serve"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: The interpreter's switch interval while serving (Python's default is 5 ms): the longest the event loop
#: waits for the GIL while the python worker thread holds it.  tito chat's loop lag p99 at 32 sessions: 13.0 ms
#: at 5 ms, 9.0 at 2 ms (``benchmarks/serve_variants.py switch``; docs/notes/serve-benchmark-2026-12-06c.md).
SWITCH_INTERVAL = 0.002


def prepare(config: ServeConfig) -> ChatTemplate | None:
    """Load the tokenizer before serving, when the upstream renders (the options checked themselves).

    The model family is decided here, once (``template.decide_family``): ``ValueError`` naming ``--parser``
    when none is recognised or named, or the one named contradicts the tokenizer's; ``TokenizerError``
    for a tokenizer that cannot be found or loaded.
    """
    upstream = UPSTREAMS.get(config.upstream_api)
    name = config.tokenizer_name
    if config.routed_experts:
        from .experts import experts_shape

        experts_shape(config)  # the rows' shape is known (ValueError saying why)
    if not upstream.renders:
        return None  # the upstream renders: count_tokens and the id check load the tokenizer on first use
    if name is None:
        raise TokenizerError(f"--upstream-api {upstream.name} renders prompts itself: it needs --tokenizer")
    template = ChatTemplate.configured(config)
    if template.family is None:
        raise ValueError(f"--parser: no output parser recognises the tokenizer {name!r}; name one")
    return template


def serve(config: ServeConfig, *, log_level: str = "warning", access_log: bool = False) -> list[int]:
    """Serve until SIGTERM/SIGINT (blocking); returns the signals that stopped it.

    uvicorn handles the signals while it serves and raises them again once it has shut down; the
    handlers installed here receive that repeat, so a clean shutdown returns instead of dying of it.
    """
    import uvicorn

    template = prepare(config)
    logging.getLogger("tito.serve").setLevel(log_level.upper())
    sock = listen(config.host, config.port)
    try:
        gateway = Gateway(config, template)
        gateway.recorder.open()
        stopped = _run(uvicorn, gateway, config, sock, log_level, access_log)
    finally:
        sock.close()
    if gateway.recorder.unwritten is not None:
        raise OutputError(gateway.recorder.unwritten)
    return stopped


def listen(host: str, port: int) -> socket.socket:
    """A socket bound and listening on ``host:port`` (``ValueError`` naming the option when it cannot be)."""
    try:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # IPPROTO_TCP named: asyncio sets TCP_NODELAY on accepted connections only when the proto says TCP.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    except OSError as exc:
        raise ValueError(f"--host {host}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ValueError(f"--port {port}: cannot listen on {host}:{port}: {reason}") from None
    sock.set_inheritable(True)
    return sock


def _run(
    uvicorn: Any, gateway: Gateway, config: ServeConfig, sock: socket.socket, log_level: str, access_log: bool
) -> list[int]:
    server = uvicorn.Server(
        uvicorn.Config(
            gateway.app,
            host=config.host,
            port=config.port,
            log_level=log_level,
            access_log=access_log,
            timeout_graceful_shutdown=int(config.grace_period),
            lifespan="on",
            timeout_keep_alive=max(1, round(config.client_idle_timeout)),
            http=protocol_class(config),
        )
    )
    raise_open_files_limit(config)
    stopped: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, frame: stopped.append(sig)) for sig in _SIGNALS}
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        server.run(sockets=[sock])
    finally:
        sys.setswitchinterval(interval)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stopped
