"""Running the gateway: checks that fail before the server starts, then uvicorn until SIGTERM/SIGINT.

uvicorn owns the signals: on SIGTERM or SIGINT it stops accepting, lets in-flight requests finish
for ``grace_period`` seconds, then runs the app's shutdown, which records the turns still queued and
flushes and closes the log.
"""

from __future__ import annotations

import logging
import signal

from ..errors import TokenizerError
from ..families import family_for, family_named
from .app import create_app
from .config import ServeConfig
from .history import HISTORIES
from .template import ChatTemplate
from .upstreams import UPSTREAMS

__all__ = ["prepare", "serve"]

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def prepare(config: ServeConfig) -> ChatTemplate | None:
    """Check the configuration and load the tokenizer before serving.

    ``ValueError`` for a setting that cannot work (naming the option), ``TokenizerError`` for a
    tokenizer that cannot be found or loaded.
    """
    try:
        upstream = UPSTREAMS.get(config.upstream_api)
    except ValueError as exc:
        raise ValueError(f"--upstream-api: {exc}") from None
    if config.history not in HISTORIES:
        raise ValueError(f"--history must be one of {', '.join(HISTORIES)}, not {config.history!r}")
    if config.history != "render" and not upstream.renders:
        raise ValueError(
            f"--history {config.history} needs --upstream-api generate: "
            f"a {upstream.name} upstream renders prompts itself"
        )
    if not config.upstream.startswith(("http://", "https://")):
        raise ValueError(f"--upstream {config.upstream!r} is not an http:// or https:// URL")
    name = config.tokenizer_name
    if not upstream.renders:
        return None  # the upstream renders: only count_tokens needs the tokenizer, loaded on its first call
    if name is None:
        raise TokenizerError(f"--upstream-api {upstream.name} renders prompts itself: it needs --tokenizer")
    template = ChatTemplate(name)
    try:
        profile = family_named(config.parser) if config.parser else family_for(name, template.tokenizer)
    except ValueError as exc:
        raise ValueError(f"--parser: {exc}") from None
    if profile is None:
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
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(config, template),
            host=config.host,
            port=config.port,
            log_level=log_level,
            access_log=access_log,
            timeout_graceful_shutdown=int(config.grace_period),
            lifespan="on",
            timeout_keep_alive=30,
        )
    )
    stopped: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, frame: stopped.append(sig)) for sig in _SIGNALS}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return stopped
