"""The upstream interface: a :class:`ChatRequest` in, a :class:`Generation` out, errors as UpstreamError."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import time
from abc import ABC, abstractmethod
from array import array
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from ...capture.records import fast_json
from ..exchange import ChatRequest, ClientError, Generation, UpstreamError

if TYPE_CHECKING:
    import httpx

    from ..config import ServeConfig
    from ..template import ChatTemplate

__all__ = [
    "ID_LIMIT",
    "INLINE_BYTES",
    "FailureLog",
    "Offload",
    "Upstream",
    "check_answer",
    "loads_answer",
    "tool_arguments_object",
    "tool_arguments_text",
    "with_arguments",
]

T = TypeVar("T")

log = logging.getLogger("tito.serve")

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
        self._vocabulary: int | None = None

    @abstractmethod
    async def generate(self, request: ChatRequest, session_id: str, call_id: Callable[[], str]) -> Generation:
        """Call the upstream once; ``call_id`` makes the ids of the reply's tool calls (the dialect's form)."""

    async def count_tokens(self, request: ChatRequest) -> int:
        """The prompt's length in tokens, rendered as ``generate`` would render it."""
        messages, tools = self.prepare(request)
        ids = await self.offload(_prompt_ids, self.template, messages, tools)
        return len(ids)

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
        """POST JSON already serialized; its answer, or an UpstreamError, as :meth:`post_json`.

        ``--upstream-timeout`` bounds the whole answer (connecting, waiting, reading a body that drips in),
        not each read.  The client's error names the route, never the upstream's address (the log line does).
        """
        import httpx

        url = self.config.upstream.rstrip("/") + path
        timeout = self.config.upstream_timeout
        try:
            response = await asyncio.wait_for(
                self.client.post(url, content=payload, headers={"content-type": "application/json", **(headers or {})}),
                timeout,
            )
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise UpstreamError(
                f"the upstream did not answer {path} within {timeout:g} s (--upstream-timeout)", 504, detail=url
            ) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(
                f"the upstream could not be reached for {path} ({type(exc).__name__})",
                detail=f"{url}: {type(exc).__name__}: {exc}",
            ) from None
        if response.status_code >= 400:
            # The upstream's own status goes to the client (a prompt too long for the context is its 400).
            raise UpstreamError(
                f"the upstream answered {response.status_code}: {_error_text(response.content)}",
                response.status_code,
                detail=url,
            )
        try:
            if len(response.content) > INLINE_BYTES:
                return await self.offload(loads_answer, response.content)
            return loads_answer(response.content)
        except (ValueError, RecursionError):
            raise UpstreamError(f"the upstream answered {path} with something that is not JSON", detail=url) from None


class FailureLog:
    """One warning line per upstream failure, at most ``burst`` a ``window`` seconds (then one line saying how
    many were left out): an upstream that is down cannot flood the gateway's stderr."""

    def __init__(self, burst: int = 10, window: float = 10.0) -> None:
        self.burst = burst
        self.window = window
        self._start = -math.inf
        self._count = 0
        self._dropped = 0

    def failed(self, session_id: str, error: Exception) -> bool:
        """Log ``error`` (session ``session_id``) unless the window's lines are spent; whether a line was written.

        Only an :class:`UpstreamError` is the upstream's failure (a client's error is not logged here).
        """
        if not isinstance(error, UpstreamError):
            return False
        now = time.monotonic()
        if now - self._start >= self.window:
            if self._dropped:
                log.warning(
                    "tito serve: %d more upstream failures in the last %g s were not logged", self._dropped, self.window
                )
            self._start, self._count, self._dropped = now, 0, 0
        if self._count >= self.burst:
            self._dropped += 1
            return False
        self._count += 1
        detail = f" [{error.detail}]" if error.detail else ""
        log.warning(
            "tito serve: session %r: upstream failure (%d): %s%s", session_id, error.status, error.message, detail
        )
        return True


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


#: The largest token id the log can hold (its ids are int32).
ID_LIMIT = 1 << 31


def check_answer(
    prompt: Any, output: Any, logprobs: Any, what: str, vocabulary: int | None = None, *, check_prompt: bool = True
) -> None:
    """The ids and logprobs an upstream returned are ones a model can produce, or UpstreamError naming the first
    that is not.

    Ids are JSON integers (``true`` is not 1, ``3.0`` is not 3) in ``0..vocabulary-1`` (``vocabulary``: the
    tokenizer's length, where the gateway has one; else the log's int32 range); logprobs are finite numbers
    at most 0, one per output id.  The prompt ids may be an ``array('i')`` (canonical history's, which the
    gateway made itself: ``check_prompt=False`` skips their values).
    """
    if not isinstance(prompt, (list, array)) or not prompt:
        raise UpstreamError(f"the upstream returned no prompt ids ({what})")
    if not isinstance(output, list) or not isinstance(logprobs, list):
        raise UpstreamError(f"the upstream's output ids or logprobs are not lists ({what})")
    if len(output) != len(logprobs):
        raise UpstreamError(
            f"the upstream answered {len(output)} output token ids but {len(logprobs)} logprobs ({what})"
        )
    limit = ID_LIMIT if vocabulary is None else min(vocabulary, ID_LIMIT)
    if check_prompt:
        _check_ids(prompt, limit, "prompt", what)
    _check_ids(output, limit, "output", what)
    # The usual answer in C-speed passes (an 8k-token output: ~0.3 ms, not ~3); the loop finds what is wrong.
    if not logprobs or (
        set(map(type, logprobs)) <= _NUMBER_TYPES and all(map(math.isfinite, logprobs)) and max(logprobs) <= 0
    ):
        return
    for position, value in enumerate(logprobs):
        if type(value) is not float and type(value) is not int:  # bool, None, str: not a logprob
            raise UpstreamError(
                f"the upstream answered logprob {_shown(value)} at output position {position}: not a number ({what})"
            )
        if not math.isfinite(value) or value > 0:
            raise UpstreamError(
                f"the upstream answered logprob {value!r} at output position {position}: "
                f"a logprob is a finite number at most 0 ({what})"
            )


_NUMBER_TYPES = frozenset({float, int})


def _check_ids(ids: Sequence[Any], limit: int, where: str, what: str) -> None:
    if not ids:
        return
    if (isinstance(ids, array) or set(map(type, ids)) == {int}) and min(ids) >= 0 and max(ids) < limit:
        return  # the usual answer, in C-speed passes; the loop below finds what is wrong
    for position, value in enumerate(ids):
        if type(value) is not int or not 0 <= value < limit:
            if type(value) is not int:
                why = "not an integer"
            elif value >= limit and limit < ID_LIMIT:
                why = f"beyond the tokenizer's {limit} ids"
            else:
                why = f"outside 0..{limit - 1}"
            raise UpstreamError(
                f"the upstream answered token id {_shown(value)} at {where} position {position}: {why} ({what})"
            )


def _shown(value: Any) -> str:
    """A value as JSON shows it (``true``, ``null``, ``"7"``), at most 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _prompt_ids(template: Callable[[], ChatTemplate], messages: list[dict[str, Any]], tools: Any) -> list[int]:
    """The prompt's ids, in a worker thread (a chat upstream's gateway loads its tokenizer on first use)."""
    return template().prompt_ids(messages, tools)
