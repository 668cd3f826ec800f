"""The upstream interface: a :class:`ChatRequest` in, a :class:`Generation` out, errors as UpstreamError.

An upstream translates: the request into the body it sends, the answer it gets into a
:class:`Generation` (each module's translations are plain functions of dicts and bytes, tested without a
server).  The transport (:mod:`..transport`) sends the body; what the answer holds is checked by
:mod:`.answers`.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from ..exchange import ChatRequest, ClientError, Generation, UpstreamError
from ..pools import in_workers
from .answers import ID_LIMIT, check_answer, loads_answer
from .failures import FailureLog

if TYPE_CHECKING:
    from ..config import ServeConfig
    from ..template import ChatTemplate
    from ..transport import Transport

__all__ = [
    "ID_LIMIT",
    "INLINE_BYTES",
    "FailureLog",
    "Offload",
    "Upstream",
    "check_answer",
    "client_sampling",
    "dumps_body",
    "loads_answer",
    "tool_arguments_object",
    "tool_arguments_text",
    "with_arguments",
]

T = TypeVar("T")

#: Bodies up to this size are (de)serialised on the event loop; larger ones in a worker thread.  Small enough
#: that no such piece of work holds the loop long: tito chat's loop lag p99 at 32 sessions was 9.3 ms with
#: 64 KiB, 8.2 ms with 16 KiB (``benchmarks/serve_variants.py inline``; docs/notes/serve-benchmark-2026-12-06c.md).
INLINE_BYTES = 16 << 10


#: Runs a blocking function in the gateway's worker threads: ``await offload(fn, *args)``.
Offload = Callable[..., Awaitable[Any]]


class Upstream(ABC):
    """One kind of inference server.  ``generate`` runs once per client request."""

    name: ClassVar[str]
    summary: ClassVar[str]
    #: Whether the gateway must load the tokenizer before serving (it renders the prompts itself).
    renders: ClassVar[bool] = False

    def __init__(
        self,
        config: ServeConfig,
        client: Transport,
        template: Callable[[], ChatTemplate],
        offload: Offload,
    ) -> None:
        self.config = config
        self.client = client
        self.template = template
        self.offload = offload
        self._vocabulary: int | None = None

    @abstractmethod
    async def generate(self, request: ChatRequest, session_id: str, call_id: Callable[[], str]) -> Generation:
        """Call the upstream once; ``call_id`` makes the ids of the reply's tool calls (the dialect's form)."""

    async def count_tokens(self, request: ChatRequest) -> int:
        """The prompt's length in tokens, rendered as ``generate`` would render it."""
        messages, tools = self.prepare(request)
        ids = await self.offload(_prompt_ids, self.template, messages, tools)
        return len(ids)

    @in_workers  # (loads the tokenizer the first time)
    def vocabulary(self) -> int | None:
        """How many ids the tokenizer has (``len(tokenizer)``, added tokens included), or None without one."""
        if self._vocabulary is None:
            try:
                self._vocabulary = len(self.template().tokenizer)
            except ClientError:  # a chat upstream started without a tokenizer: the log's range bounds the ids
                return None
        return self._vocabulary

    def max_tokens(self, request: ChatRequest) -> int | None:
        """The client's limit on new tokens, lowered to ``--max-tokens-cap``."""
        cap, asked = self.config.max_tokens_cap, request.max_tokens
        if cap is None:
            return asked
        return cap if asked is None else min(asked, cap)

    def recorded(self, session_id: str, generation: Generation) -> None:  # noqa: B027  (most hold nothing)
        """The turn of ``generation`` is in the log (what it holds may now be built on)."""

    def session_finished(self, session_id: str) -> None:  # noqa: B027  (most upstreams hold nothing)
        """A session finished: forget what is held for it (nothing, unless the upstream holds history)."""

    def prepare(self, request: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The messages and tools as this upstream renders or sends them (arguments normalised)."""
        return request.messages, request.tools

    async def parse(self, path: str, content: bytes, read: Callable[[bytes], T]) -> T:
        """``read(content)`` (the answer's bytes, from ``await self.client.post(path, payload)``), in a worker
        thread past :data:`INLINE_BYTES`; an answer that is not JSON is an UpstreamError."""
        try:
            if len(content) > INLINE_BYTES:
                return cast(T, await self.offload(read, content))
            return read(content)
        except (ValueError, RecursionError):
            raise UpstreamError(
                f"the upstream answered {path} with something that is not JSON", detail=self.client.base + path
            ) from None


def dumps_body(body: Any) -> bytes:
    """A request body as compact JSON bytes."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def client_sampling(request: ChatRequest) -> dict[str, Any]:
    """The sampling settings the client gave (``temperature``, ``top_p``, ``top_k``, ``stop``), named as both
    upstreams' wires name them."""
    sampling = {key: getattr(request, key) for key in ("temperature", "top_p", "top_k")}
    sampling = {key: value for key, value in sampling.items() if value is not None}
    if request.stop:
        sampling["stop"] = request.stop
    return sampling


def tool_arguments_object(value: Any) -> Any:
    """Tool-call arguments as a JSON value (a template renders an object with ``tojson``)."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


#: Argument texts up to this many characters are remembered once canonicalised (see :func:`tool_arguments_text`).
_CACHED_ARGUMENTS_CHARS = 8 << 10


def tool_arguments_text(value: Any) -> str:
    """Tool-call arguments as one canonical JSON text (what an OpenAI-compatible server takes)."""
    if isinstance(value, str):
        # Every request replays every earlier tool call: remember the small texts (2,048 of at most
        # 8 Ki characters) rather than parse and re-serialise the whole history's arguments each turn.
        if len(value) <= _CACHED_ARGUMENTS_CHARS:
            return _canonical_text(value)
        return _canonicalise(value)
    return json.dumps(value, ensure_ascii=False)


def _canonicalise(text: str) -> str:
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return json.dumps(parsed, ensure_ascii=False)


_canonical_text = functools.lru_cache(maxsize=2048)(_canonicalise)


def with_arguments(messages: list[dict[str, Any]], form: Callable[[Any], Any]) -> list[dict[str, Any]]:
    """``messages`` with each tool call's arguments put in ``form`` (the originals untouched)."""
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = dict(message)
            message["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": form(call["function"].get("arguments"))}}
                for call in calls
            ]
        out.append(message)
    return out


@in_workers
def _prompt_ids(template: Callable[[], ChatTemplate], messages: list[dict[str, Any]], tools: Any) -> list[int]:
    """The prompt's ids, in a worker thread (a chat upstream's gateway loads its tokenizer on first use)."""
    return template().prompt_ids(messages, tools)
