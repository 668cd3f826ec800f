"""An OpenAI-compatible ``/v1/chat/completions`` that returns token ids (vLLM's ``return_token_ids``).

The server renders and parses; the gateway sends the messages (tool-call arguments as canonical JSON
text), asks for ids and logprobs, and records ``prompt_token_ids``, ``choices[0].token_ids`` and
``choices[0].logprobs.content[].logprob``.  An answer whose id counts disagree with each other or
with ``usage.completion_tokens`` (vLLM's known defects) is an upstream error, never a turn.

Two translations, no I/O: :func:`chat_call` (a request into the body sent) and :func:`chat_generation`
(the answer's bytes into a :class:`Generation`).  The conversation is serialized once: each message's
JSON text (:class:`~tito_cli.capture.records.PromptMessages`) makes the body, the row's
``prompt_messages`` cell and format 2's delta.  The answer is read by a typed decoder that checks the
ids (integers in the int32 range) and logprobs (numbers at most 0) while it parses; an answer it
refuses is read again as ``json.loads`` reads it and checked by :func:`~.answers.check_answer`, which
says what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, cast

import msgspec

from ...capture.records import PromptMessages
from ..exchange import ChatRequest, ClientError, Generation, OutputCall, UpstreamError, assistant_message
from ..experts import weight_versions
from .answers import ID_LIMIT, check_answer, compact_ids, loads_answer
from .base import INLINE_BYTES, Upstream, client_sampling, dumps_body, tool_arguments_text, with_arguments

__all__ = ["ChatCall", "ChatUpstream", "chat_call", "chat_generation", "read_chat_answer"]

PATH = "/v1/chat/completions"


@dataclass(frozen=True)
class ChatCall:
    """What one request sends: the body's bytes, and what the turn records of it."""

    payload: bytes
    messages: PromptMessages
    tools: list[dict[str, Any]] | None
    #: The sampling parameters sent (recorded as provenance), the template options sent.
    sampling: dict[str, Any]
    chat_template_kwargs: dict[str, Any]


def chat_call(
    request: ChatRequest, model: str, chat_template_kwargs: dict[str, Any], max_tokens: int | None
) -> ChatCall:
    """The body of ``request`` for the upstream (``model``, the gateway's template options, its token limit)."""
    try:
        messages = PromptMessages.of(with_arguments(request.messages, tool_arguments_text))
    except ValueError as exc:
        raise ClientError(f"the request cannot be recorded: {exc}") from None
    body: dict[str, Any] = {"model": model, "stream": False, "logprobs": True, "return_token_ids": True}
    if request.tools:
        body["tools"] = request.tools
    kwargs = {**chat_template_kwargs, **request.chat_template_kwargs}
    if kwargs:
        body["chat_template_kwargs"] = kwargs  # vLLM passes them to its render
    sampling: dict[str, Any] = {"max_tokens": max_tokens} if max_tokens is not None else {}
    sampling.update(client_sampling(request))
    body.update(sampling)
    # The messages' texts as the log holds them, spliced in: the conversation is not serialized again.
    payload = b'{"messages":[' + ",".join(messages.texts).encode() + b"]," + dumps_body(body)[1:]
    return ChatCall(payload, messages, request.tools, sampling, kwargs)


@dataclass(frozen=True)
class ChatAnswer:
    """The parts of a chat answer a turn is made of; ``checked``: its ids and logprobs are known good."""

    prompt_ids: Any
    output_ids: Any
    logprobs: Any
    message: Any
    finish_reason: Any
    usage: Any
    id: Any
    metadata: Any
    checked: bool


_Id = Annotated[int, msgspec.Meta(ge=0, lt=ID_LIMIT)]


class _Logprob(msgspec.Struct):
    logprob: Annotated[float, msgspec.Meta(le=0)]


class _Logprobs(msgspec.Struct):
    content: list[_Logprob]


class _Choice(msgspec.Struct):
    message: Any
    token_ids: list[_Id]
    logprobs: _Logprobs
    finish_reason: Any = None


class _Answer(msgspec.Struct):
    choices: Annotated[list[_Choice], msgspec.Meta(min_length=1)]
    prompt_token_ids: Annotated[list[_Id], msgspec.Meta(min_length=1)]
    id: Any = None
    usage: Any = None
    metadata: Any = None


_typed = msgspec.json.Decoder(_Answer)


def read_chat_answer(content: bytes) -> ChatAnswer:
    """The answer's parts: typed and checked where the fast decoder takes it, else as ``json.loads`` reads it.

    ``ValueError`` when it is not JSON; UpstreamError when it lacks a part.
    """
    try:
        fast = _typed.decode(content)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        pass  # not the usual answer: read it as json does, and let the checks say what is wrong
    else:
        choice = fast.choices[0]
        logprobs = [entry.logprob for entry in choice.logprobs.content]
        prompt = compact_ids(fast.prompt_token_ids)
        return ChatAnswer(prompt, choice.token_ids, logprobs, choice.message, choice.finish_reason, fast.usage,
                          fast.id, fast.metadata, checked=True)  # fmt: skip
    answer = loads_answer(content)
    try:
        choice = answer["choices"][0]
        logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        return ChatAnswer(answer["prompt_token_ids"], choice["token_ids"], logprobs, choice["message"],
                          choice.get("finish_reason"), answer.get("usage"), answer.get("id"), answer.get("metadata"),
                          checked=False)  # fmt: skip
    except (KeyError, IndexError, TypeError, AttributeError):
        raise UpstreamError(
            "the upstream's chat answer lacks prompt_token_ids, choices[0].token_ids or logprobs "
            "(a vLLM that supports return_token_ids is needed)"
        ) from None


def chat_generation(
    call: ChatCall, answer: ChatAnswer, vocabulary: int | None, call_id: Callable[[], str]
) -> Generation:
    """The turn of ``answer`` to ``call``, or UpstreamError for an answer no model could have given."""
    prompt_ids, output_ids, logprobs = answer.prompt_ids, answer.output_ids, answer.logprobs
    if not _known_good(answer, vocabulary):
        check_answer(prompt_ids, output_ids, logprobs, PATH, vocabulary)  # raises, naming what is wrong
        prompt_ids = compact_ids(prompt_ids)
    usage = answer.usage
    completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if completion is not None and completion != len(output_ids):
        raise UpstreamError(f"the upstream returned {len(output_ids)} token ids for {completion} completion tokens")
    limit = call.sampling.get("max_tokens")
    if limit is not None and len(output_ids) > limit:
        raise UpstreamError(f"the upstream answered {len(output_ids)} output token ids for max_tokens {limit}")
    message = _checked_message(answer.message)
    calls = [
        OutputCall(call_id(), call["function"]["name"], tool_arguments_text(call["function"].get("arguments", "{}")))
        for call in message.get("tool_calls") or []
    ]  # each id in the dialect's form: the id the client will echo
    reasoning = message.get("reasoning_content", message.get("reasoning")) or None
    content = message.get("content") or ""
    kwargs = call.chat_template_kwargs
    return Generation(
        prompt_ids=prompt_ids,
        output_ids=list(output_ids),
        logprobs=logprobs,
        finish_reason=str(answer.finish_reason or "stop"),
        content=content,
        reasoning=reasoning,
        tool_calls=calls,
        ill_formed=False,
        prompt_messages=call.messages,
        tools=call.tools,
        response_message=assistant_message(content, reasoning, calls, tool_arguments_text),
        upstream_id=str(answer.id) if answer.id else None,
        notes={"chat_template_kwargs": kwargs} if kwargs else {},
        sampling=call.sampling,
        weight_versions=weight_versions(answer.metadata),
    )


def _known_good(answer: ChatAnswer, vocabulary: int | None) -> bool:
    """Whether the typed decoder's checks leave nothing to check but the counts and the tokenizer's size."""
    if not answer.checked or len(answer.output_ids) != len(answer.logprobs):
        return False
    if vocabulary is None or vocabulary >= ID_LIMIT:
        return True
    top = int(answer.prompt_ids.max())
    return top < vocabulary and (not answer.output_ids or max(answer.output_ids) < vocabulary)


class ChatUpstream(Upstream):
    name = "chat"
    summary = "an OpenAI-compatible server returning token ids (vLLM return_token_ids): it renders and parses"

    def prepare(self, request: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return with_arguments(request.messages, tool_arguments_text), request.tools

    async def generate(self, request: ChatRequest, session_id: str, call_id: Callable[[], str]) -> Generation:
        made = (request, self.config.model_name, self.config.chat_template_kwargs, self.max_tokens(request))
        call = await self.offload(chat_call, *made) if request.size > INLINE_BYTES else chat_call(*made)
        content = await self.client.post(PATH, call.payload)
        answer = await self.parse(PATH, content, read_chat_answer)
        # The tokenizer's size bounds the ids; a chat gateway loads its tokenizer on first use, in a worker.
        vocabulary = self._vocabulary if self._vocabulary is not None else await self.offload(self.vocabulary)
        if not answer.checked and isinstance(answer.prompt_ids, list) and len(answer.prompt_ids) > INLINE_BYTES // 8:
            made_turn = await self.offload(chat_generation, call, answer, vocabulary, call_id)  # ~2 ms at 32k ids
            return cast(Generation, made_turn)
        return chat_generation(call, answer, vocabulary, call_id)


def _checked_message(message: Any) -> dict[str, Any]:
    """The answer's ``choices[0].message`` if it has a chat message's shape, else UpstreamError naming the field."""
    if not isinstance(message, dict):
        raise UpstreamError(f"the upstream's choices[0].message is a {_kind(message)}, not an object")
    for key in ("content", "reasoning_content", "reasoning"):
        if message.get(key) is not None and not isinstance(message[key], str):
            raise UpstreamError(f"the upstream's choices[0].message.{key} is a {_kind(message[key])}, not a string")
    calls = message.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise UpstreamError(f"the upstream's choices[0].message.tool_calls is a {_kind(calls)}, not an array")
    for i, call in enumerate(calls or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise UpstreamError(f"the upstream's tool call {i} has no function with a string name")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, (str, dict)):
            raise UpstreamError(f"the upstream's tool call {i} has arguments that are a {_kind(arguments)}")
    return message


def _kind(value: Any) -> str:
    """A JSON value's kind, as JSON names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {str: "string", list: "array", dict: "object", int: "number", float: "number"}.get(type(value), "value")
