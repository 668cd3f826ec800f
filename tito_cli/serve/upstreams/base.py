"""The upstream interface: a :class:`ChatRequest` in, a :class:`Generation` out, errors as UpstreamError."""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from array import array
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ...capture.records import fast_json
from ..exchange import ChatRequest, Generation, UpstreamError

if TYPE_CHECKING:
    import httpx

    from ..config import ServeConfig
    from ..template import ChatTemplate

__all__ = [
    "INLINE_BYTES",
    "Offload",
    "Upstream",
    "check_lengths",
    "loads_answer",
    "tool_arguments_object",
    "tool_arguments_text",
    "with_arguments",
]

T = TypeVar("T")

#: Bodies up to this size are (de)serialised on the event loop; larger ones in a worker thread.
INLINE_BYTES = 64 << 10


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
        client: httpx.AsyncClient,
        template: Callable[[], ChatTemplate],
        offload: Offload,
    ) -> None:
        self.config = config
        self.client = client
        self.template = template
        self.offload = offload

    @abstractmethod
    async def generate(self, request: ChatRequest, session_id: str, call_id: Callable[[], str]) -> Generation:
        """Call the upstream once; ``call_id`` makes the ids of the reply's tool calls (the dialect's form)."""

    async def count_tokens(self, request: ChatRequest) -> int:
        """The prompt's length in tokens, rendered as ``generate`` would render it."""
        messages, tools = self.prepare(request)
        ids = await self.offload(_prompt_ids, self.template, messages, tools)
        return len(ids)

    def max_tokens(self, request: ChatRequest) -> int | None:
        """The client's limit on new tokens, lowered to ``--max-tokens-cap``."""
        cap, asked = self.config.max_tokens_cap, request.max_tokens
        if cap is None:
            return asked
        return cap if asked is None else min(asked, cap)

    def session_finished(self, session_id: str) -> None:  # noqa: B027  (most upstreams hold nothing)
        """A session finished: forget what is held for it (nothing, unless the upstream holds history)."""

    def prepare(self, request: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        """The messages and tools as this upstream renders or sends them (arguments normalised)."""
        return request.messages, request.tools

    async def post_json(
        self, path: str, body: dict[str, Any], headers: dict[str, str] | None = None, *, heavy: bool = True
    ) -> Any:
        """POST ``body`` to the upstream and return its JSON answer; every failure as an UpstreamError.

        ``heavy``: the body is large enough that serialising it belongs in a worker thread (a small one
        costs less than the hand-over).
        """
        payload = await self.offload(_dumps, body) if heavy else _dumps(body)
        return await self.post_payload(path, payload, headers)

    async def post_payload(self, path: str, payload: bytes, headers: dict[str, str] | None = None) -> Any:
        """POST JSON already serialized; its answer, or an UpstreamError, as :meth:`post_json`."""
        import httpx

        url = self.config.upstream.rstrip("/") + path
        try:
            response = await self.client.post(
                url, content=payload, headers={"content-type": "application/json", **(headers or {})}
            )
        except httpx.TimeoutException:
            raise UpstreamError(f"the upstream {url} did not answer in time", 504) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"the upstream {url} could not be reached ({type(exc).__name__}: {exc})") from None
        if response.status_code >= 400:
            # The upstream's own status goes to the client (a prompt too long for the context is its 400).
            raise UpstreamError(
                f"the upstream answered {response.status_code}: {_error_text(response.content)}", response.status_code
            )
        try:
            if len(response.content) > INLINE_BYTES:
                return await self.offload(loads_answer, response.content)
            return loads_answer(response.content)
        except ValueError:
            raise UpstreamError(f"the upstream {url} answered with something that is not JSON") from None


def loads_answer(content: bytes) -> Any:
    """An upstream's JSON answer, as ``json.loads`` reads it.

    msgspec reads it where it can (a chat answer carries the whole prompt's ids: ~30k integers at 32k
    tokens, several times faster than ``json``); ``json`` reads whatever msgspec refuses (NaN or Infinity
    logprobs, lone surrogates, numbers beyond float64), so the value is ``json``'s either way. msgspec nests
    a little deeper before its recursion limit; an upstream's answer is a few levels deep.
    """
    try:
        return fast_json()(content)
    except (ValueError, RecursionError):
        return json.loads(content)


def _dumps(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _error_text(content: bytes) -> str:
    text = content[:2000].decode("utf-8", "replace")
    try:
        data = json.loads(content)
    except ValueError:
        return text.strip() or "(no body)"
    if isinstance(data, dict):
        error = data.get("error", data.get("message", data.get("detail")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:2000]
    return text


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


def check_lengths(prompt: Any, output: Any, logprobs: Any, what: str) -> None:
    """The ids and logprobs an upstream returned are lists of the right types and lengths, or UpstreamError.

    The prompt ids may be an ``array('i')`` (canonical history's, which the gateway made itself).
    """
    if not isinstance(prompt, (list, array)) or not prompt:
        raise UpstreamError(f"the upstream returned no prompt ids ({what})")
    if not isinstance(output, list) or not isinstance(logprobs, list) or len(output) != len(logprobs):
        raise UpstreamError(f"the upstream's output ids and logprobs do not match ({what})")


def _prompt_ids(template: Callable[[], ChatTemplate], messages: list[dict[str, Any]], tools: Any) -> list[int]:
    """The prompt's ids, in a worker thread (a chat upstream's gateway loads its tokenizer on first use)."""
    return template().prompt_ids(messages, tools)
