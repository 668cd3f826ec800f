"""An OpenAI-compatible ``/v1/chat/completions`` that returns token ids (vLLM's ``return_token_ids``).

The server renders and parses; the gateway sends the messages (tool-call arguments as canonical JSON
text), asks for ids and logprobs, and records ``prompt_token_ids``, ``choices[0].token_ids`` and
``choices[0].logprobs.content[].logprob``.  An answer whose id counts disagree with each other or
with ``usage.completion_tokens`` (vLLM's known defects) is an upstream error, never a turn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..exchange import ChatRequest, Generation, OutputCall, UpstreamError, assistant_message
from ..experts import weight_versions
from .base import INLINE_BYTES, Upstream, check_answer, tool_arguments_text, with_arguments

__all__ = ["ChatUpstream"]


class ChatUpstream(Upstream):
    name = "chat"
    summary = "an OpenAI-compatible server returning token ids (vLLM return_token_ids): it renders and parses"

    def prepare(self, request: ChatRequest) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
        return with_arguments(request.messages, tool_arguments_text), request.tools

    async def generate(self, request: ChatRequest, session_id: str, call_id: Callable[[], str]) -> Generation:
        messages, tools = self.prepare(request)
        body: dict[str, Any] = {
            "model": self.config.model_name,
            "messages": messages,
            "stream": False,
            "logprobs": True,
            "return_token_ids": True,
        }
        if tools:
            body["tools"] = tools
        kwargs = {**self.config.chat_template_kwargs, **request.chat_template_kwargs}
        if kwargs:
            body["chat_template_kwargs"] = kwargs  # vLLM passes them to its render
        limit = self.max_tokens(request)
        if limit is not None:
            body["max_tokens"] = limit
        for key in ("temperature", "top_p", "top_k"):
            value = getattr(request, key)
            if value is not None:
                body[key] = value
        if request.stop:
            body["stop"] = request.stop
        sampling: dict[str, Any] = {
            key: body[key] for key in ("max_tokens", "temperature", "top_p", "top_k", "stop") if key in body
        }
        answer = await self.post_json("/v1/chat/completions", body, heavy=request.size > INLINE_BYTES)
        try:
            choice = answer["choices"][0]
            message = choice["message"]
            prompt_ids = answer["prompt_token_ids"]
            output_ids = choice["token_ids"]
            logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        except (KeyError, IndexError, TypeError):
            raise UpstreamError(
                "the upstream's chat answer lacks prompt_token_ids, choices[0].token_ids or logprobs "
                "(a vLLM that supports return_token_ids is needed)"
            ) from None
        # The tokenizer's size bounds the ids; a chat gateway loads its tokenizer on first use, in a worker.
        vocabulary = self._vocabulary if self._vocabulary is not None else await self.offload(self.vocabulary)
        checked = (prompt_ids, output_ids, logprobs, "/v1/chat/completions", vocabulary)
        if isinstance(prompt_ids, list) and len(prompt_ids) > INLINE_BYTES // 8:  # a 32k-token prompt: ~2 ms
            await self.offload(check_answer, *checked)
        else:
            check_answer(*checked)
        usage = answer.get("usage")
        completion = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if completion is not None and completion != len(output_ids):
            raise UpstreamError(f"the upstream returned {len(output_ids)} token ids for {completion} completion tokens")
        limit_sent = body.get("max_tokens")
        if limit_sent is not None and len(output_ids) > limit_sent:
            raise UpstreamError(f"the upstream answered {len(output_ids)} output token ids for max_tokens {limit_sent}")
        message = _checked_message(message)
        calls = []
        for call in message.get("tool_calls") or []:
            function = call["function"]
            calls.append(
                OutputCall(
                    call_id(),  # the dialect's form: the id the client will echo
                    function["name"],
                    tool_arguments_text(function.get("arguments", "{}")),
                )
            )
        reasoning = message.get("reasoning_content", message.get("reasoning"))
        content = message.get("content") or ""
        return Generation(
            prompt_ids=list(prompt_ids),
            output_ids=list(output_ids),
            logprobs=logprobs,
            finish_reason=str(choice.get("finish_reason") or "stop"),
            content=content,
            reasoning=reasoning or None,
            tool_calls=calls,
            ill_formed=False,
            prompt_messages=messages,
            tools=tools,
            response_message=assistant_message(content, reasoning or None, calls, tool_arguments_text),
            upstream_id=str(answer.get("id")) if answer.get("id") else None,
            notes={"chat_template_kwargs": kwargs} if kwargs else {},
            sampling=sampling,
            weight_versions=weight_versions(answer.get("metadata")),
        )


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
