"""Anthropic Messages: ``POST /v1/messages`` (also with ``?beta=true``) and ``/v1/messages/count_tokens``.

The translation to chat-template messages (docs/serve.md lists it):

* ``system`` (a string or text blocks) -> one ``system`` message, the texts joined by newlines;
* a ``role: "system"`` message in the middle of ``messages`` (Claude Code sends them) -> appended to
  the preceding user message as a text block ``<system-reminder>\\n…\\n</system-reminder>\\n`` (to
  the next user message when no user message precedes it);
* each user ``text`` block -> its own ``user`` message; each ``tool_result`` -> a ``tool`` message
  (``tool_call_id`` = its ``tool_use_id``; its content's texts joined);
* an assistant message -> one ``assistant`` message: ``content`` = its texts joined, ``reasoning_content``
  = its ``thinking`` blocks joined (signatures dropped), ``tool_calls`` = its ``tool_use`` blocks
  (``id``, ``name``, ``input`` as the arguments);
* tools ``{name, description, input_schema}`` -> function tools; server tools (a ``type`` other than
  ``custom``) the model cannot run are dropped, and the turn's metadata names them.

Only the fields above are read: ``cache_control`` markers and thinking signatures never reach the
recorded messages, so a message's identity does not change when the client moves them.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..exchange import ChatRequest, ClientError, Generation, new_id
from .base import Dialect, sampling, sse, text_of, want

__all__ = ["AnthropicMessages"]

_TEXT = ("text",)
_STOP = {"length": "max_tokens", "tool_calls": "tool_use", "stop": "end_turn"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    409: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _reminder(text: str) -> dict[str, Any]:
    return {"type": "text", "text": f"<system-reminder>\n{text}\n</system-reminder>\n"}


def _blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    blocks = want(content, list, where)
    for i, block in enumerate(blocks):
        want(block, dict, f"{where}[{i}]")
    return list(blocks)


def _fold_system(messages: list[Any]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """``(index, role, blocks)`` per user/assistant message, mid-list system messages folded into user ones."""
    out: list[tuple[int, str, list[dict[str, Any]]]] = []
    waiting: list[dict[str, Any]] = []  # reminders with no user message before them yet
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        message = want(message, dict, where)
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise ClientError(f"{where}.role {role!r} is not user, assistant or system")
        blocks = _blocks(message.get("content"), f"{where}.content")
        if role == "system":
            reminder = _reminder(text_of(blocks, f"{where}.content", _TEXT))
            previous = next((entry for entry in reversed(out) if entry[1] == "user"), None)
            if previous is None:
                waiting.append(reminder)
            else:
                previous[2].append(reminder)
            continue
        if role == "user" and waiting:
            blocks = [*blocks, *waiting]
            waiting = []
        out.append((i, role, list(blocks)))
    if waiting:
        out.append((len(messages), "user", waiting))
    return out


def _tool_result_text(block: dict[str, Any], where: str) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return text_of(content, f"{where}.content", _TEXT)
    return text_of(content, f"{where}.content", _TEXT)


class AnthropicMessages(Dialect):
    name = "anthropic"
    summary = "Anthropic Messages: POST /v1/messages (and ?beta=true), /v1/messages/count_tokens, SSE and not"
    path = "/v1/messages"
    count_path = "/v1/messages/count_tokens"
    call_prefix = "toolu_"
    marker = "anthropic-version"

    def parse(self, body: Any) -> ChatRequest:
        body = want(body, dict, "the request body")
        messages: list[dict[str, Any]] = []
        system = body.get("system")
        if system is not None and system != "" and system != []:
            messages.append({"role": "system", "content": self._system_text(system)})
        raw = want(body.get("messages"), list, "messages")
        if not raw:
            raise ClientError("messages must not be empty")
        for i, role, blocks in _fold_system(raw):
            where = f"messages[{i}].content"
            if role == "user":
                messages.extend(self._user(blocks, where))
            else:
                messages.append(self._assistant(blocks, where))
        request = ChatRequest(messages=messages)
        request.tools, dropped = self._tools(body.get("tools"))
        if dropped:
            request.notes["dropped_tools"] = dropped
        sampling(request, body, ("max_tokens",))
        stop = body.get("stop_sequences")
        if stop is not None:
            request.stop = [want(s, str, "stop_sequences[]") for s in want(stop, list, "stop_sequences")]
        return request

    def _system_text(self, system: Any) -> str:
        if isinstance(system, str):
            return system
        blocks = want(system, list, "system")
        texts = []
        for i, block in enumerate(blocks):
            block = want(block, dict, f"system[{i}]")
            if block.get("type") != "text":
                raise ClientError(f"system[{i}]: block type {block.get('type')!r} is not supported (only text)")
            texts.append(want(block.get("text"), str, f"system[{i}].text"))
        return "\n".join(texts)

    def _user(self, blocks: list[dict[str, Any]], where: str) -> list[dict[str, Any]]:
        out = []
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text":
                out.append({"role": "user", "content": want(block.get("text"), str, f"{where}[{j}].text")})
            elif kind == "tool_result":
                message = {"role": "tool", "content": _tool_result_text(block, f"{where}[{j}]")}
                if block.get("tool_use_id") is not None:
                    message["tool_call_id"] = want(block["tool_use_id"], str, f"{where}[{j}].tool_use_id")
                out.append(message)
            else:
                raise ClientError(
                    f"{where}[{j}]: user block type {kind!r} is not supported (text and tool_result; "
                    "the model reads text only)"
                )
        return out

    def _assistant(self, blocks: list[dict[str, Any]], where: str) -> dict[str, Any]:
        texts, thinking, calls = [], [], []
        for j, block in enumerate(blocks):
            kind = block.get("type")
            if kind == "text":
                texts.append(want(block.get("text"), str, f"{where}[{j}].text"))
            elif kind == "thinking":
                thinking.append(want(block.get("thinking"), str, f"{where}[{j}].thinking"))
            elif kind == "redacted_thinking":
                continue  # opaque to any model but the one that wrote it
            elif kind == "tool_use":
                call = {
                    "id": want(block.get("id"), str, f"{where}[{j}].id"),
                    "type": "function",
                    "function": {
                        "name": want(block.get("name"), str, f"{where}[{j}].name"),
                        "arguments": want(block.get("input", {}), dict, f"{where}[{j}].input"),
                    },
                }
                calls.append(call)
            else:
                raise ClientError(
                    f"{where}[{j}]: assistant block type {kind!r} is not supported (text, thinking, tool_use)"
                )
        message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
        reasoning = "\n".join(thinking)
        if reasoning:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
        return message

    def _tools(self, tools: Any) -> tuple[list[dict[str, Any]] | None, list[str]]:
        if tools is None:
            return None, []
        out, dropped = [], []
        for i, tool in enumerate(want(tools, list, "tools")):
            tool = want(tool, dict, f"tools[{i}]")
            kind = tool.get("type")
            if kind not in (None, "custom"):
                dropped.append(str(tool.get("name") or kind))
                continue
            function: dict[str, Any] = {"name": want(tool.get("name"), str, f"tools[{i}].name")}
            if tool.get("description") is not None:
                function["description"] = want(tool["description"], str, f"tools[{i}].description")
            function["parameters"] = want(
                tool.get("input_schema", {"type": "object"}), dict, f"tools[{i}].input_schema"
            )
            out.append({"type": "function", "function": function})
        return out or None, dropped

    # -- answers -------------------------------------------------------------------------------

    def _content(self, generation: Generation) -> list[dict[str, Any]]:
        blocks: list[dict[str, Any]] = []
        if generation.reasoning:
            blocks.append(
                {"type": "thinking", "thinking": generation.reasoning, "signature": _signature(generation.reasoning)}
            )
        if generation.content or not generation.tool_calls:
            blocks.append({"type": "text", "text": generation.content})
        for call in generation.tool_calls:
            blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments_object()})
        return blocks

    def _usage(self, generation: Generation) -> dict[str, Any]:
        return {
            "input_tokens": len(generation.prompt_ids),
            "output_tokens": len(generation.output_ids),
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }

    def response(self, request: ChatRequest, generation: Generation, model: str) -> dict[str, Any]:
        return {
            "id": new_id("msg_"),
            "type": "message",
            "role": "assistant",
            "model": request.model or model,
            "content": self._content(generation),
            "stop_reason": _STOP[generation.stop],
            "stop_sequence": None,
            "usage": self._usage(generation),
        }

    def events(self, request: ChatRequest, generation: Generation, model: str) -> list[bytes]:
        message = self.response(request, generation, model)
        usage = message["usage"]
        start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
        out = [sse({"type": "message_start", "message": start}, "message_start")]
        for index, block in enumerate(message["content"]):
            kind = block["type"]
            opening: dict[str, Any]
            if kind == "thinking":
                opening = {"type": "thinking", "thinking": "", "signature": ""}
                deltas = [
                    {"type": "thinking_delta", "thinking": block["thinking"]},
                    {"type": "signature_delta", "signature": block["signature"]},
                ]
            elif kind == "text":
                opening = {"type": "text", "text": ""}
                deltas = [{"type": "text_delta", "text": block["text"]}] if block["text"] else []
            else:
                opening = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
                deltas = [{"type": "input_json_delta", "partial_json": json.dumps(block["input"], ensure_ascii=False)}]
            out.append(
                sse({"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start")
            )
            for delta in deltas:
                out.append(sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta"))
            out.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
        delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
        out.append(sse({"type": "message_delta", "delta": delta, "usage": usage}, "message_delta"))
        out.append(sse({"type": "message_stop"}, "message_stop"))
        return out

    def error(self, status: int, message: str) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def count_response(self, tokens: int) -> dict[str, Any]:
        return {"input_tokens": tokens}

    def models(self, name: str) -> dict[str, Any]:
        model = {"type": "model", "id": name, "display_name": name, "created_at": "1970-01-01T00:00:00Z"}
        return {"data": [model], "has_more": False, "first_id": name, "last_id": name}


def _signature(reasoning: str) -> str:
    """An opaque signature for a thinking block (clients echo it; the gateway ignores it on the way back)."""
    return "tito-" + hashlib.sha256(reasoning.encode()).hexdigest()[:32]
