"""OpenAI Chat Completions: ``POST /v1/chat/completions``, streaming and not.

The client's messages are already chat-template messages: they pass through (``developer`` read as
``system``, text parts joined, a null content read as ""), with only function tools.
"""

from __future__ import annotations

import time
from typing import Any

from ..exchange import ChatRequest, ClientError, Generation, new_id
from .base import Dialect, sampling, sse, text_of, want

__all__ = ["ChatCompletions"]

_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
_TEXT = ("text",)
_STOP = {"length": "length", "tool_calls": "tool_calls", "stop": "stop"}


def parse_tools(tools: Any, where: str = "tools") -> list[dict[str, Any]] | None:
    """OpenAI function tools, checked (only ``function`` tools: the model runs no other kind)."""
    if tools is None:
        return None
    out = []
    for i, tool in enumerate(want(tools, list, where)):
        tool = want(tool, dict, f"{where}[{i}]")
        if tool.get("type") != "function":
            raise ClientError(f"{where}[{i}]: tool type {tool.get('type')!r} is not supported (only function tools)")
        function = want(tool.get("function"), dict, f"{where}[{i}].function")
        want(function.get("name"), str, f"{where}[{i}].function.name")
        out.append({"type": "function", "function": function})
    return out or None


def parse_tool_calls(calls: Any, where: str) -> list[dict[str, Any]]:
    out = []
    for i, call in enumerate(want(calls, list, where)):
        call = want(call, dict, f"{where}[{i}]")
        function = want(call.get("function"), dict, f"{where}[{i}].function")
        name = want(function.get("name"), str, f"{where}[{i}].function.name")
        arguments = function.get("arguments", "{}")
        entry: dict[str, Any] = {"type": "function", "function": {"name": name, "arguments": arguments}}
        if call.get("id") is not None:
            entry = {"id": want(call["id"], str, f"{where}[{i}].id"), **entry}
        out.append(entry)
    return out


class ChatCompletions(Dialect):
    name = "chat"
    summary = "OpenAI Chat Completions: POST /v1/chat/completions, streaming and not"
    path = "/v1/chat/completions"

    def parse(self, body: Any) -> ChatRequest:
        body = want(body, dict, "the request body")
        raw = want(body.get("messages"), list, "messages")
        if not raw:
            raise ClientError("messages must not be empty")
        messages = []
        for i, message in enumerate(raw):
            where = f"messages[{i}]"
            message = want(message, dict, where)
            role = _ROLES.get(str(message.get("role")))
            if role is None:
                raise ClientError(f"{where}.role {message.get('role')!r} is not one of {', '.join(_ROLES)}")
            out: dict[str, Any] = {"role": role, "content": text_of(message.get("content"), f"{where}.content", _TEXT)}
            reasoning = message.get("reasoning_content", message.get("reasoning"))
            if role == "assistant" and reasoning:
                out["reasoning_content"] = want(reasoning, str, f"{where}.reasoning_content")
            if role == "assistant" and message.get("tool_calls"):
                out["tool_calls"] = parse_tool_calls(message["tool_calls"], f"{where}.tool_calls")
            if role == "tool" and message.get("tool_call_id") is not None:
                out["tool_call_id"] = want(message["tool_call_id"], str, f"{where}.tool_call_id")
            messages.append(out)
        if body.get("n") not in (None, 1):
            raise ClientError("n must be 1 (one generation per request)")
        request = ChatRequest(messages=messages, tools=parse_tools(body.get("tools")))
        sampling(request, body, ("max_completion_tokens", "max_tokens"))
        stop = body.get("stop")
        if stop is not None:
            request.stop = (
                [stop] if isinstance(stop, str) else [want(s, str, "stop[]") for s in want(stop, list, "stop")]
            )
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None:
            request.chat_template_kwargs = dict(want(kwargs, dict, "chat_template_kwargs"))
        options = body.get("stream_options")
        request.options["include_usage"] = bool(isinstance(options, dict) and options.get("include_usage"))
        return request

    def _message(self, generation: Generation) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": generation.content if generation.content or not generation.tool_calls else None,
        }
        if generation.reasoning:
            message["reasoning_content"] = generation.reasoning
        if generation.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments_text()}}
                for c in generation.tool_calls
            ]
        return message

    def _usage(self, generation: Generation) -> dict[str, Any]:
        prompt, completion = len(generation.prompt_ids), len(generation.output_ids)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": generation.cached_tokens},
        }

    def response(self, request: ChatRequest, generation: Generation, model: str) -> dict[str, Any]:
        return {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.model or model,
            "choices": [
                {
                    "index": 0,
                    "message": self._message(generation),
                    "logprobs": None,
                    "finish_reason": _STOP[generation.stop],
                }
            ],
            "usage": self._usage(generation),
        }

    def events(self, request: ChatRequest, generation: Generation, model: str) -> list[bytes]:
        base = {
            "id": new_id("chatcmpl-"),
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": request.model or model,
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse({**base, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]})

        out = [chunk({"role": "assistant", "content": ""})]
        if generation.reasoning:
            out.append(chunk({"reasoning_content": generation.reasoning}))
        if generation.content:
            out.append(chunk({"content": generation.content}))
        for i, call in enumerate(generation.tool_calls):
            out.append(
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments_text()},
                            }
                        ]
                    }
                )
            )
        out.append(chunk({}, _STOP[generation.stop]))
        if request.options.get("include_usage"):
            out.append(sse({**base, "choices": [], "usage": self._usage(generation)}))
        out.append(sse("[DONE]"))
        return out

    def error(self, status: int, message: str) -> dict[str, Any]:
        return openai_error(status, message)


def openai_error(status: int, message: str) -> dict[str, Any]:
    """OpenAI's error body."""
    kind = "invalid_request_error" if status < 500 else ("timeout" if status == 504 else "server_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}
