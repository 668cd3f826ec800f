"""ServeConfig: everything ``tito serve`` is told, as one frozen dataclass ``create_app`` takes."""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from .registry import DEFAULT_LIVE_SESSIONS

__all__ = ["ServeConfig", "option_flag"]


def _option(default: Any = MISSING, help: str = "", *, factory: Any = MISSING, **cli: Any) -> Any:
    """A setting ``tito serve`` takes: ``help`` is its option's help text (``{shipped}`` and ``{families}``
    filled in by the command); ``cli``: ``flag`` (another name than ``--field-name``), ``min``, ``metavar``."""
    return field(default=default, default_factory=factory, metadata={"help": help, **cli})


@dataclass(frozen=True)
class ServeConfig:
    """The gateway's settings: ``tito serve``'s options, generated from these fields (``cli/serve.py``).

    A field's ``metadata["help"]`` is its option's help and its default the option's default; a field
    without help is a setting for library callers only (``create_app``).
    """

    logs: Path = _option(help="The turn-log folder to write (several gateways may share one).")  # noqa: RUF009
    upstream: str = _option(help="The inference server's base URL.")
    upstream_api: str = _option(
        "generate",
        "generate: SGLang's native /generate (the gateway renders and parses); "
        "chat: an OpenAI-compatible server returning token ids (vLLM return_token_ids).",
    )
    tokenizer: str | None = _option(
        None,
        "The tokenizer to render with and record: a hub id in the local Hugging Face cache, a folder, or a "
        "shipped name ({shipped}); NAME=PATH records NAME and loads PATH. Default: --model.",
    )
    parser: str | None = _option(
        None, "The output parser's model family for generate: {families} (default: recognised from the tokenizer)."
    )
    history: str = _option(
        "render",
        "How generate builds prompt ids: render (every conversation rendered and tokenized whole, as the "
        "reference adapters do) or canonical (a turn that continues the last one extends the token history the "
        "gateway produced, rendering only what is new: no drift; docs/serve.md).",
    )
    routed_experts: bool = _option(
        False,
        "Ask the generate upstream for each call's routed experts (return_routed_experts) and record them.",
    )
    routed_experts_shape: tuple[int, int] | None = _option(
        None,
        "The rows' shape; default: num_hidden_layers x num_experts_per_tok of the config.json beside "
        "the tokenizer.",
        metavar="LAYERS,TOPK",
    )
    chat_template_kwargs: dict[str, Any] = _option(  # noqa: RUF009  (a field(), its factory dict)
        help='Options every prompt is rendered with, as a JSON object (e.g. \'{"enable_thinking": false}\' for '
        "Qwen3): applied when the gateway renders (generate), forwarded as chat_template_kwargs (chat); a Chat "
        "Completions request's own chat_template_kwargs override them; recorded in each turn's metadata.",
        factory=dict,
    )
    model: str | None = _option(None, "The model name sent upstream and listed by /v1/models.")
    host: str = _option("127.0.0.1", "The address to bind. The gateway trusts its network: see docs/serve.md.")
    port: int = _option(8000, "The port to listen on.")
    upstream_timeout: float = _option(600.0, "Seconds to wait for the upstream's answer.", min=0.1)
    #: Seconds to wait for a connection to the upstream.
    connect_timeout: float = 10.0
    #: The shared upstream client's connection pool.
    max_connections: int = 512
    upstream_keepalive: float = _option(
        2.0,
        "Seconds an idle upstream connection is kept for reuse; keep it below the upstream's own idle "
        "timeout (5 s in vLLM and SGLang).",
        min=0.0,
    )
    max_request_bytes: int = _option(64 << 20, "Larger request bodies are refused (413).", min=1024)
    workers: int = _option(
        1,
        "Threads that render and tokenize prompts. One keeps the event loop's lag lowest; more tokenize several "
        "prompts at once where cores are spare (the tokenizer lets go of the GIL, the template's rendering does "
        "not). The rest of a turn's CPU work always runs in one thread (docs/serve.md, \"Running it for real\").",
        min=1,
    )
    #: ``max_new_tokens`` sent to a ``generate`` upstream when the client gives no limit.
    default_max_tokens: int = 8192
    max_tokens_cap: int | None = _option(None, "Lower any request's max_tokens to this many new tokens.", min=1)
    grace_period: float = _option(30.0, "Seconds in-flight requests get to finish on SIGTERM/SIGINT.", min=0)
    #: Seconds with nothing in flight after which freed memory goes back to the system (0: never).
    idle_trim: float = 1.0
    flush_every: float = _option(
        10.0,
        "Seconds after which recorded turns are written as Parquet files (every turn is in the journal "
        "before it is answered: a SIGKILL loses nothing).",
        min=0.1,
    )
    fsync: bool = _option(
        False, "fsync the journal after every turn and finish: survives a power loss too (slower)."
    )
    allow_origins: tuple[str, ...] = _option(
        (),
        "A web origin (https://app.example) whose browser requests are served (repeatable). By default any "
        "request with an Origin header is refused: a web page must not drive the gateway.",
        flag="--allow-origin",
    )
    client_header_timeout: float = _option(
        10.0, "Seconds a client has to send a request's headers before its connection is closed.", min=0.1
    )
    client_idle_timeout: float = _option(30.0, "Seconds an idle keep-alive client connection is kept.", min=0.1)
    max_client_connections: int = _option(
        1024, "Open client connections beyond this close the one idle longest.", min=1
    )
    live_sessions: int = _option(
        DEFAULT_LIVE_SESSIONS,
        "Sessions whose state the gateway keeps (call kinds, held history, GET /sessions/{id}'s turns); beyond "
        "it the least recently used idle session's is forgotten (its next prompt is rendered whole; never its "
        "seq or its finish).",
        min=1,
    )

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
                raise ValueError(f"{_named(name)} must be a non-empty name, not {value!r}")
        if not isinstance(self.host, str) or not self.host:
            raise ValueError(f"--host must be an address, not {self.host!r}")
        _whole("port", self.port, least=0)
        if self.port > 65535:
            raise ValueError(f"--port must be at most 65535, not {self.port}")
        counts = (
            "max_connections", "max_request_bytes", "workers", "default_max_tokens", "max_client_connections",
            "live_sessions",
        )  # fmt: skip
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
                        f"{_named(name)} {value} needs --upstream-api generate: "
                        f"a {upstream.name} upstream renders prompts and parses outputs itself"
                    )


def option_flag(name: str) -> str | None:
    """The ``serve`` command's option for the setting ``name`` (``--field-name`` unless its ``flag`` says),
    or None for a setting the command does not take."""
    [setting] = [f for f in fields(ServeConfig) if f.name == name]
    if "help" not in setting.metadata:
        return None
    return str(setting.metadata.get("flag", "--" + name.replace("_", "-")))


def _named(name: str) -> str:
    """How a setting is named in messages: the ``serve`` command's option, else the field itself."""
    return option_flag(name) or f"ServeConfig.{name}"


def _one_of(name: str, value: Any, names: list[str]) -> None:
    if value not in names:
        raise ValueError(f"{_named(name)} must be one of {', '.join(names)}, not {value!r}")


def _whole(name: str, value: Any, *, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{_named(name)} must be a whole number of at least {least}, not {value!r}")


def _seconds(name: str, value: Any, *, zero: bool) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    if not ok or value < 0 or (value == 0 and not zero):
        least = "0 or more" if zero else "more than 0"
        raise ValueError(f"{_named(name)} must be a finite number of seconds, {least}, not {value!r}")
