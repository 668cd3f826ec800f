"""``tito serve``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from .._paths import SHIPPED_NAMES
from ..errors import EXIT_USAGE, MissingDependencyError, TitoError
from ..families import FAMILIES
from .app import app, exit_codes_help, guarded

T = TypeVar("T")


class SettingError(TitoError):
    """A ``tito serve`` setting that cannot work (``ServeConfig``'s or start-up's ``ValueError``): one line, exit 2."""

    exit_code = EXIT_USAGE


@app.command(
    help="Run the capture gateway: answer agent CLIs in the Anthropic Messages, OpenAI Responses and Chat "
    "Completions dialects, call the inference server, and record every generation call as a turn "
    "(docs/serve.md). Serves until SIGTERM or Ctrl-C, then finishes in-flight requests and closes the log.\n\n"
    + exit_codes_help()
)
@guarded
def serve(
    logs: Path = typer.Option(..., "--logs", help="The turn-log folder to write (several gateways may share one)."),
    upstream: str = typer.Option(..., "--upstream", help="The inference server's base URL."),
    upstream_api: str = typer.Option(
        "generate",
        "--upstream-api",
        help="generate: SGLang's native /generate (the gateway renders and parses); "
        "chat: an OpenAI-compatible server returning token ids (vLLM return_token_ids).",
    ),
    tokenizer: str = typer.Option(
        None,
        "--tokenizer",
        help="The tokenizer to render with and record: a hub id in the local Hugging Face cache, a folder, or a "
        f"shipped name ({', '.join(SHIPPED_NAMES)}); NAME=PATH records NAME and loads PATH. Default: --model.",
    ),
    parser: str = typer.Option(
        None,
        "--parser",
        help="The output parser's model family for generate: "
        f"{', '.join(FAMILIES.names())} (default: recognised from the tokenizer).",
    ),
    chat_template_kwargs: str = typer.Option(
        None,
        "--chat-template-kwargs",
        help='Options every prompt is rendered with, as a JSON object (e.g. \'{"enable_thinking": false}\' for '
        "Qwen3): applied when the gateway renders (generate), forwarded as chat_template_kwargs (chat); a Chat "
        "Completions request's own chat_template_kwargs override them; recorded in each turn's metadata.",
    ),
    history: str = typer.Option(
        "render",
        "--history",
        help="How generate builds prompt ids: render (every conversation rendered and tokenized whole, as the "
        "reference adapters do) or canonical (a turn that continues the last one extends the token history the "
        "gateway produced, rendering only what is new: no drift; docs/serve.md).",
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="The address to bind. The gateway trusts its network: see docs/serve.md."
    ),
    port: int = typer.Option(8000, "--port", help="The port to listen on."),
    model: str = typer.Option(None, "--model", help="The model name sent upstream and listed by /v1/models."),
    max_request_bytes: int = typer.Option(
        64 << 20, "--max-request-bytes", min=1024, help="Larger request bodies are refused (413)."
    ),
    grace_period: float = typer.Option(
        30.0, "--grace-period", min=0, help="Seconds in-flight requests get to finish on SIGTERM/SIGINT."
    ),
    flush_every: float = typer.Option(
        10.0,
        "--flush-every",
        min=0.1,
        help="Seconds after which recorded turns are written as Parquet files (every turn is in the journal "
        "before it is answered: a SIGKILL loses nothing).",
    ),
    fsync: bool = typer.Option(
        False, "--fsync", help="fsync the journal after every turn and finish: survives a power loss too (slower)."
    ),
    upstream_timeout: float = typer.Option(
        600.0, "--upstream-timeout", min=0.1, help="Seconds to wait for the upstream's answer."
    ),
    upstream_keepalive: float = typer.Option(
        2.0, "--upstream-keepalive", min=0.0,
        help="Seconds an idle upstream connection is kept for reuse; keep it below the upstream's own idle "
        "timeout (5 s in vLLM and SGLang).",
    ),
    max_tokens_cap: int = typer.Option(
        None, "--max-tokens-cap", min=1, help="Lower any request's max_tokens to this many new tokens."
    ),
    allow_origin: list[str] = typer.Option(
        [], "--allow-origin",
        help="A web origin (https://app.example) whose browser requests are served (repeatable). By default any "
        "request with an Origin header is refused: a web page must not drive the gateway.",
    ),
    max_client_connections: int = typer.Option(
        1024, "--max-client-connections", min=1,
        help="Open client connections beyond this close the one idle longest.",
    ),
    client_header_timeout: float = typer.Option(
        10.0, "--client-header-timeout", min=0.1,
        help="Seconds a client has to send a request's headers before its connection is closed.",
    ),
    client_idle_timeout: float = typer.Option(
        30.0, "--client-idle-timeout", min=0.1, help="Seconds an idle keep-alive client connection is kept."
    ),
    routed_experts: bool = typer.Option(
        False, "--routed-experts",
        help="Ask the generate upstream for each call's routed experts (return_routed_experts) and record them.",
    ),
    routed_experts_shape: str = typer.Option(
        None, "--routed-experts-shape", metavar="LAYERS,TOPK",
        help="The rows' shape; default: num_hidden_layers x num_experts_per_tok of the config.json beside "
        "the tokenizer.",
    ),
    log_level: str = typer.Option("warning", "--log-level", help="uvicorn's and the gateway's log level."),
) -> None:
    shape = None if routed_experts_shape is None else _shape(routed_experts_shape)
    try:
        from ..serve.config import ServeConfig
        from ..serve.run import serve as run_gateway
    except ImportError as exc:
        raise MissingDependencyError(
            f"tito serve needs the serve extra ({exc.name} is missing)", tip='pip install "tito-cli[serve]"'
        ) from None
    options = _json_object(chat_template_kwargs)
    config = _checked(
        ServeConfig,
        logs=logs,
        upstream=upstream,
        upstream_api=upstream_api,
        tokenizer=tokenizer,
        parser=parser,
        chat_template_kwargs=options,
        history=history,
        model=model,
        host=host,
        port=port,
        max_request_bytes=max_request_bytes,
        grace_period=grace_period,
        flush_every=flush_every,
        fsync=fsync,
        upstream_timeout=upstream_timeout,
        upstream_keepalive=upstream_keepalive,
        max_tokens_cap=max_tokens_cap,
        allow_origins=tuple(allow_origin),
        max_client_connections=max_client_connections,
        client_header_timeout=client_header_timeout,
        client_idle_timeout=client_idle_timeout,
        routed_experts=routed_experts,
        routed_experts_shape=shape,
    )
    try:
        run_gateway(config, log_level=log_level)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def _checked(make: Callable[..., T], **settings: Any) -> T:
    """``make(**settings)`` (the ``ServeConfig``, which checks itself), its ``ValueError`` a usage error."""
    try:
        return make(**settings)
    except ValueError as exc:
        raise SettingError(str(exc)) from None


def _shape(text: str) -> tuple[int, int]:
    """``--routed-experts-shape LAYERS,TOPK``: two positive integers, or a usage error."""
    try:
        layers, topk = (int(part) for part in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not LAYERS,TOPK (two integers)") from None
    if layers < 1 or topk < 1:
        raise typer.BadParameter(f"{text!r}: both numbers must be at least 1")
    return layers, topk


def _json_object(text: str | None) -> dict[str, Any]:
    """``--chat-template-kwargs``: a JSON object, or a usage error saying what it is instead."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON ({exc})", param_hint="--chat-template-kwargs") from None
    if not isinstance(value, dict):
        raise typer.BadParameter(
            f"a JSON object is needed, not {type(value).__name__}", param_hint="--chat-template-kwargs"
        )
    return value
