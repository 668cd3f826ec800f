"""ServeConfig: everything ``tito serve`` is told, as one frozen dataclass ``create_app`` takes."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["ServeConfig"]


@dataclass(frozen=True)
class ServeConfig:
    """The gateway's settings (``tito serve``'s options; defaults are the command's)."""

    #: The turn-log folder the gateway writes (several gateways may share one: file names never collide).
    logs: Path
    #: The inference server's base URL (``http://127.0.0.1:30000``).
    upstream: str
    #: ``generate`` (SGLang's native /generate, token in/out) or ``chat`` (an OpenAI-compatible server
    #: returning token ids, vLLM's ``return_token_ids``).
    upstream_api: str = "generate"
    #: The tokenizer (hub name, shipped name or folder) the log records and ``generate`` renders with;
    #: default: ``model``. ``NAME=PATH``, as the other commands take it: the log records ``NAME``, the
    #: tokenizer is loaded from ``PATH``.
    tokenizer: str | None = None
    #: The output parser's family for ``generate`` (``--parser``); default: recognised from the tokenizer.
    parser: str | None = None
    #: How ``generate`` builds prompt ids: ``render`` every conversation whole, or continue the
    #: ``canonical`` token history the gateway produced (docs/spec.md §11).
    history: str = "render"
    #: Ask a ``generate`` upstream for routed experts (``--routed-experts``) and record them.
    routed_experts: bool = False
    #: The rows' ``(layers, topk)`` (``--routed-experts-shape L,K``); default: the model's ``config.json``.
    routed_experts_shape: tuple[int, int] | None = None
    #: Options every prompt is rendered with (``--chat-template-kwargs``, e.g. ``{"enable_thinking": false}``):
    #: applied by the gateway's render (generate), forwarded as ``chat_template_kwargs`` (chat); a Chat
    #: Completions request's own ``chat_template_kwargs`` override them key by key.
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    #: The model name sent upstream and listed by ``GET /v1/models``; default: the tokenizer's name.
    model: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    #: Seconds to wait for the upstream's answer (a generation can be long) and to connect to it.
    upstream_timeout: float = 600.0
    connect_timeout: float = 10.0
    #: The shared upstream client's connection pool.
    max_connections: int = 512
    #: Seconds an idle upstream connection is kept for reuse. Below the upstream's own idle timeout (5 s in
    #: vLLM's and SGLang's uvicorn), so the gateway never sends on a connection the server is closing.
    upstream_keepalive: float = 2.0
    #: Request bodies larger than this are refused with 413 before they are parsed.
    max_request_bytes: int = 64 << 20
    #: Threads that render chat templates, tokenize, (de)serialise large bodies and record turns.
    workers: int = min(8, (os.cpu_count() or 2) + 2)
    #: ``max_new_tokens`` sent to a ``generate`` upstream when the client gives no limit.
    default_max_tokens: int = 8192
    #: The most new tokens any request may ask for (a client's larger ``max_tokens`` is lowered to it):
    #: Claude Code asks for 64000, more than many models' context holds beside the prompt.
    max_tokens_cap: int | None = None
    #: On SIGTERM/SIGINT: seconds in-flight requests get to finish before they are cut.
    grace_period: float = 30.0
    #: Seconds with nothing in flight after which freed memory goes back to the system (0: never).
    idle_trim: float = 1.0
    #: Seconds after which journaled turns are written as Parquet files (nothing is lost on a kill either way).
    flush_every: float = 10.0
    #: fsync the write-ahead journal after every turn and finish (survives a power loss, not only a kill).
    fsync: bool = False
    #: Web origins (``https://app.example``) whose browser requests are served; any other ``Origin`` is
    #: refused (403), as is a ``Host`` that does not name the gateway (``serve/guard.py``).
    allow_origins: tuple[str, ...] = ()
    #: Seconds a client has to send a request's head (from connecting, or from its first byte after an answer).
    client_header_timeout: float = 10.0
    #: Seconds an idle keep-alive client connection is kept after an answer.
    client_idle_timeout: float = 30.0
    #: Open client connections beyond this close the one idle longest (``serve/connections.py``).
    max_client_connections: int = 1024

    @property
    def tokenizer_name(self) -> str | None:
        """The tokenizer's name, as the log records it (``NAME`` of ``NAME=PATH``)."""
        if self.tokenizer:
            return self.tokenizer.partition("=")[0] or self.tokenizer
        return self.model

    @property
    def tokenizer_folder(self) -> str | None:
        """Where the tokenizer is loaded from when ``--tokenizer NAME=PATH`` says (else ``None``: the name)."""
        name, sep, path = (self.tokenizer or "").partition("=")
        return path if sep and name and path else None

    @property
    def model_name(self) -> str:
        """The model name sent upstream."""
        return self.model or self.tokenizer_name or "tito"

    @property
    def public_model_name(self) -> str:
        """The model name clients see (``/v1/models``, each answer's ``model``): a tokenizer given as a folder
        shows its last part, never the filesystem path."""
        name = self.tokenizer_name
        if self.model:
            return self.model
        if name and (name.startswith(("/", ".", "~")) or Path(name).exists()):
            return Path(name.rstrip("/")).name or "tito"
        return name or "tito"

    def __post_init__(self) -> None:
        """Check every setting, so that ``create_app`` and ``tito serve`` refuse the same mistakes the same way.

        ``ValueError`` naming the option (``--history``; a setting the command does not take, by its field
        name) and saying what it needs.  Only what needs I/O (loading the tokenizer) waits for start-up.
        """
        from ..families import FAMILIES
        from .history import HISTORIES
        from .upstreams import UPSTREAMS

        if not isinstance(self.logs, (str, Path)) or not str(self.logs):
            raise ValueError(f"--logs must be a folder, not {self.logs!r}")
        if not isinstance(self.upstream, str) or not self.upstream.startswith(("http://", "https://")):
            raise ValueError(f"--upstream {self.upstream!r} is not an http:// or https:// URL")
        _one_of("upstream_api", self.upstream_api, UPSTREAMS.names())
        _one_of("history", self.history, list(HISTORIES))
        if self.parser is not None:
            _one_of("parser", self.parser, FAMILIES.names())
        for name in ("tokenizer", "model"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{_option(name)} must be a non-empty name, not {value!r}")
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"--host must be an address, not {self.host!r}")
        _whole("port", self.port, least=0)
        if self.port > 65535:
            raise ValueError(f"--port must be at most 65535, not {self.port}")
        counts = ("max_connections", "max_request_bytes", "workers", "default_max_tokens", "max_client_connections")
        for name in counts:
            _whole(name, getattr(self, name), least=1)
        if self.max_tokens_cap is not None:
            _whole("max_tokens_cap", self.max_tokens_cap, least=1)
        waits = ("upstream_timeout", "connect_timeout", "flush_every", "client_header_timeout", "client_idle_timeout")
        for name in waits:
            _seconds(name, getattr(self, name), zero=False)
        for name in ("upstream_keepalive", "grace_period", "idle_trim"):
            _seconds(name, getattr(self, name), zero=True)
        if not isinstance(self.fsync, bool):
            raise ValueError(f"--fsync must be true or false, not {self.fsync!r}")
        origins = self.allow_origins
        if not isinstance(origins, tuple) or not all(isinstance(o, str) and o for o in origins):
            raise ValueError(f"--allow-origin must be a tuple of origins (https://app.example), not {origins!r}")
        options = self.chat_template_kwargs
        if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
            raise ValueError(f"--chat-template-kwargs must be a JSON object, not {options!r}")
        try:
            json.dumps(options, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"--chat-template-kwargs must be a JSON object ({exc})") from None
        if not isinstance(self.routed_experts, bool):
            raise ValueError(f"--routed-experts must be true or false, not {self.routed_experts!r}")
        shape = self.routed_experts_shape
        if shape is not None and not (
            isinstance(shape, tuple) and len(shape) == 2 and all(type(n) is int and n > 0 for n in shape)
        ):
            raise ValueError(f"--routed-experts-shape must be two positive integers LAYERS,TOPK, not {shape!r}")
        if self.routed_experts and self.upstream_api != "generate":
            raise ValueError("--routed-experts needs --upstream-api generate (SGLang's return_routed_experts)")
        upstream = UPSTREAMS.get(self.upstream_api)
        if not upstream.renders:
            for name, value, default in (("history", self.history, "render"), ("parser", self.parser, None)):
                if value != default:
                    raise ValueError(
                        f"{_option(name)} {value} needs --upstream-api generate: "
                        f"a {upstream.name} upstream renders prompts and parses outputs itself"
                    )


#: Settings the ``serve`` command takes under another name than ``--field-name``, or not at all.
_OPTIONS = {"allow_origins": "--allow-origin"}
_NOT_OPTIONS = {"connect_timeout", "max_connections", "workers", "default_max_tokens", "idle_trim"}


def _option(name: str) -> str:
    """How a setting is named in messages: the ``serve`` command's option, else the field itself."""
    assert name in {f.name for f in fields(ServeConfig)}, name
    if name in _NOT_OPTIONS:
        return f"ServeConfig.{name}"
    return _OPTIONS.get(name, "--" + name.replace("_", "-"))


def _one_of(name: str, value: Any, names: list[str]) -> None:
    if value not in names:
        raise ValueError(f"{_option(name)} must be one of {', '.join(names)}, not {value!r}")


def _whole(name: str, value: Any, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{_option(name)} must be a whole number of at least {least}, not {value!r}")


def _seconds(name: str, value: Any, *, zero: bool) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "more than 0"
        raise ValueError(f"{_option(name)} must be a finite number of seconds, {least}, not {value!r}")
