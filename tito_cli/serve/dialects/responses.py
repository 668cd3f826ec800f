"""OpenAI Responses: ``POST /v1/responses``, stateless, streaming and not (what Codex speaks).

Stateless: ``previous_response_id`` and ``store: true`` are refused with a 400 (the whole conversation
must come in ``input``, as Codex sends it with ``store: false``).  The translation to chat-template
messages (docs/serve.md lists it):

* ``instructions`` and the leading ``system``/``developer`` messages -> one ``system`` message, the
  texts joined by blank lines; a later one -> appended to the preceding user message as a
  ``<system-reminder>`` block, as the Anthropic dialect folds mid-list system messages;
* ``user`` messages -> ``user`` messages (their ``input_text`` parts joined);
* ``reasoning``, assistant ``message`` and ``function_call`` items in a row -> one ``assistant``
  message (``reasoning_content`` from the reasoning's text or summary, ``content`` from the
  ``output_text`` parts, ``tool_calls`` with ``id`` = ``call_id``);
* ``function_call_output`` -> a ``tool`` message (``tool_call_id`` = ``call_id``);
* ``function`` tools -> function tools (those inside a ``namespace`` too); tools the model cannot run
  (hosted ``web_search``, ``file_search``, ``custom``, ...) are dropped, and the turn's metadata names
  them (``dropped_tools``).  Any other input item type is refused with a 400 naming it.
"""

from __future__ import annotations

import time
from typing import Any

from ..exchange import ChatRequest, ClientError, Generation, new_id
from .base import Dialect, sampling, text_of, want
from .chat import openai_error
from .responses_events import response_events

__all__ = ["OpenAIResponses"]

_TEXT = ("input_text", "output_text", "text")
_SYSTEM = ("system", "developer")


def _reminder(text: str) -> str:
    return f"<system-reminder>\n{text}\n</system-reminder>\n"


class _Builder:
    """Chat messages built item by item; consecutive assistant items merge into one message."""

    def __init__(self) -> None:
        self.system: list[str] = []
        self.messages: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the assistant message still taking items
        self.waiting: list[str] = []  # system texts with no user message before them

    def system_text(self, text: str) -> None:
        if not self.messages:
            self.system.append(text)
            return
        self.open = None
        user = next((m for m in reversed(self.messages) if m["role"] == "user"), None)
        if user is None:
            self.waiting.append(_reminder(text))
        else:
            user["content"] += _reminder(text)

    def user(self, text: str) -> None:
        self.open = None
        self.messages.append({"role": "user", "content": text + "".join(self.waiting)})
        self.waiting = []

    def tool(self, call_id: str, text: str) -> None:
        self.open = None
        self.messages.append({"role": "tool", "content": text, "tool_call_id": call_id})

    def assistant(self, *, after: tuple[str, ...]) -> dict[str, Any]:
        """The open assistant message, or a new one when the open one already has any of ``after``."""
        if self.open is None or any(self.open.get(key) for key in after):
            self.open = {"role": "assistant", "content": ""}
            self.messages.append(self.open)
        return self.open

    def result(self) -> list[dict[str, Any]]:
        head = [{"role": "system", "content": "\n\n".join(self.system)}] if self.system else []
        if self.waiting:
            self.messages.append({"role": "user", "content": "".join(self.waiting)})
        return head + self.messages


class OpenAIResponses(Dialect):
    name = "responses"
    summary = "OpenAI Responses: POST /v1/responses, stateless (no previous_response_id, no store), SSE and not"
    path = "/v1/responses"

    def parse(self, body: Any) -> ChatRequest:
        body = want(body, dict, "the request body")
        if body.get("previous_response_id") is not None:
            raise ClientError(
                "previous_response_id is not supported: this gateway is stateless; send the whole conversation "
                "in input (store: false)"
            )
        if body.get("store") is True:
            raise ClientError("store: true is not supported: this gateway keeps no responses; send store: false")
        build = _Builder()
        if body.get("instructions"):
            build.system_text(want(body["instructions"], str, "instructions"))
        raw = body.get("input")
        if isinstance(raw, str):
            build.user(raw)
        else:
            for i, item in enumerate(want(raw, list, "input")):
                self._item(build, want(item, dict, f"input[{i}]"), f"input[{i}]")
        messages = build.result()
        if not messages:
            raise ClientError("input must not be empty")
        request = ChatRequest(messages=messages)
        request.tools, dropped = self._tools(body.get("tools"))
        if dropped:
            request.notes["dropped_tools"] = dropped
        sampling(request, body, ("max_output_tokens",))
        request.options["echo"] = {
            key: body.get(key)
            for key in ("instructions", "tool_choice", "parallel_tool_calls", "metadata", "reasoning", "text")
            if key in body
        }
        return request

    def _item(self, build: _Builder, item: dict[str, Any], where: str) -> None:
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            text = text_of(item.get("content"), f"{where}.content", _TEXT)
            if role in _SYSTEM:
                build.system_text(text)
            elif role == "user":
                build.user(text)
            elif role == "assistant":
                message = build.assistant(after=("content", "tool_calls"))
                message["content"] = text
            else:
                raise ClientError(f"{where}.role {role!r} is not user, assistant, system or developer")
        elif kind == "reasoning":
            parts = item.get("content") or item.get("summary") or []
            texts = [want(p, dict, f"{where}.content[]").get("text", "") for p in want(parts, list, f"{where}.summary")]
            text = "\n".join(t for t in texts if isinstance(t, str))
            message = build.assistant(after=("content", "tool_calls", "reasoning_content"))
            if text:
                message["reasoning_content"] = text
        elif kind == "function_call":
            call = {
                "id": want(item.get("call_id"), str, f"{where}.call_id"),
                "type": "function",
                "function": {
                    "name": want(item.get("name"), str, f"{where}.name"),
                    "arguments": want(item.get("arguments", "{}"), str, f"{where}.arguments"),
                },
            }
            build.assistant(after=()).setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else text_of(output, f"{where}.output", _TEXT)
            build.tool(want(item.get("call_id"), str, f"{where}.call_id"), text)
        else:
            raise ClientError(
                f"{where}: input item type {kind!r} is not supported (message, reasoning, function_call, "
                "function_call_output)"
            )

    def _tools(self, tools: Any) -> tuple[list[dict[str, Any]] | None, list[str]]:
        if tools is None:
            return None, []
        out: list[dict[str, Any]] = []
        dropped: list[str] = []

        def add(tool: dict[str, Any], where: str) -> None:
            kind = tool.get("type")
            if kind == "function":
                function: dict[str, Any] = {"name": want(tool.get("name"), str, f"{where}.name")}
                if tool.get("description") is not None:
                    function["description"] = want(tool["description"], str, f"{where}.description")
                function["parameters"] = want(tool.get("parameters") or {"type": "object"}, dict, f"{where}.parameters")
                out.append({"type": "function", "function": function})
            elif kind == "namespace" and isinstance(tool.get("tools"), list):
                for j, inner in enumerate(tool["tools"]):
                    add(want(inner, dict, f"{where}.tools[{j}]"), f"{where}.tools[{j}]")
            else:
                dropped.append(str(tool.get("name") or kind))

        for i, tool in enumerate(want(tools, list, "tools")):
            add(want(tool, dict, f"tools[{i}]"), f"tools[{i}]")
        return out or None, dropped

    # -- answers -------------------------------------------------------------------------------

    def _output(self, generation: Generation) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        if generation.reasoning:
            items.append(
                {
                    "type": "reasoning",
                    "id": new_id("rs_"),
                    "summary": [{"type": "summary_text", "text": generation.reasoning}],
                    "content": [{"type": "reasoning_text", "text": generation.reasoning}],
                }
            )
        if generation.content or not generation.tool_calls:
            items.append(
                {
                    "type": "message",
                    "id": new_id("msg_"),
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": generation.content, "annotations": [], "logprobs": []}],
                }
            )
        for call in generation.tool_calls:
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc_"),
                    "call_id": call.id,
                    "name": call.name,
                    "arguments": call.arguments_text(),
                    "status": "completed",
                }
            )
        return items

    def _response(self, request: ChatRequest, model: str, generation: Generation | None) -> dict[str, Any]:
        echo = request.options.get("echo", {})
        response: dict[str, Any] = {
            "id": new_id("resp_"),
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": request.model or model,
            "output": [],
            "error": None,
            "incomplete_details": None,
            "instructions": echo.get("instructions"),
            "metadata": echo.get("metadata") or {},
            "parallel_tool_calls": echo.get("parallel_tool_calls", True),
            "tool_choice": echo.get("tool_choice", "auto"),
            "tools": [],
            "temperature": request.temperature,
            "top_p": request.top_p,
            "max_output_tokens": request.max_tokens,
            "previous_response_id": None,
            "store": False,
            "usage": None,
        }
        if generation is not None:
            cut = generation.stop == "length"
            response["status"] = "incomplete" if cut else "completed"
            response["incomplete_details"] = {"reason": "max_output_tokens"} if cut else None
            response["output"] = self._output(generation)
            response["usage"] = {
                "input_tokens": len(generation.prompt_ids),
                "input_tokens_details": {"cached_tokens": generation.cached_tokens},
                "output_tokens": len(generation.output_ids),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": len(generation.prompt_ids) + len(generation.output_ids),
            }
        return response

    def response(self, request: ChatRequest, generation: Generation, model: str) -> dict[str, Any]:
        return self._response(request, model, generation)

    def events(self, request: ChatRequest, generation: Generation, model: str) -> list[bytes]:
        return response_events(self._response(request, model, generation))

    def error(self, status: int, message: str) -> dict[str, Any]:
        return openai_error(status, message)
