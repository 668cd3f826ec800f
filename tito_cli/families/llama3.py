"""Llama 3 Instruct: header-delimited turns, no reasoning, tool calls as JSON objects in the text.

Llama-3-Instruct's template renders each message as ``<|start_header_id|>ROLE<|end_header_id|>\\n\\n``,
its content ``| trim`` and ``<|eot_id|>``: leading and trailing whitespace of what the model wrote is
lost on replay.  It has no tool syntax of its own: agents prompt the model to write a call as a JSON
object on its own line (``{"name": …, "parameters": {…}}``, the form Llama 3.1 made standard, maybe
after ``<|python_tag|>``), servers' ``llama3_json`` parsers read it, and the harness hands the call
back to the template as that JSON in the content (:meth:`Llama3.server_messages`), re-serialized.
"""

from __future__ import annotations

import json
from typing import Any

from .base import FamilyProfile, ParsedOutput, ToolCall

__all__ = ["Llama3"]

_EOT, _EOM, _PYTHON_TAG = "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"
_CALL = '{"name"'
#: Arguments as ``json.dumps`` writes them, and without spaces, as models sometimes do.
_JSON, _LOOSE_JSON = (", ", ": "), (",", ":")


class Llama3(FamilyProfile):
    name = "llama3"
    summary = "Llama 3 Instruct: header turns, content trimmed, JSON tool calls in the text"
    hub_names = (r"meta-llama/(Meta-)?Llama-3",)
    end_of_turn = (_EOT,)
    message_starts = ("<|start_header_id|>",)
    trims_content = True
    tokenizer_marks = ("<|start_header_id|>", "<|end_header_id|>", _EOT)

    def tool_call_start(self, text: str, at: int) -> int | None:
        """The JSON call object that ``at`` lies in (opened before it, in the same message)."""
        opened = text.rfind(_CALL, 0, at)
        if opened < 0 or text.find(_EOT, opened, at) >= 0:
            return None
        return opened

    def read_tool_call(self, text: str, start: int) -> Any:
        call = _read_call(text, start)
        return None if call is None else (call[0].name, call[0].arguments)

    def parse_output(self, text: str) -> ParsedOutput:
        """Calls: the JSON objects from the first line that opens one to the end; the text before is content.

        Objects that do not read (cut, not JSON, no ``name``) leave the text as content, ill-formed.
        """
        for end in (_EOT, _EOM):  # (<|eom_id|>: Llama 3.1's end of a message that waits for a tool's answer)
            if text.endswith(end):
                text = text[: -len(end)]
                break
        at = 0 if text.startswith((_CALL, _PYTHON_TAG)) else text.find("\n" + _CALL)
        if at < 0:
            return ParsedOutput(content=text)
        content = text[:at]
        rest = text[at:].lstrip("\n").removeprefix(_PYTHON_TAG)
        calls: list[ToolCall] = []
        position = 0
        while position < len(rest):
            found = _read_call(rest, position)
            if found is None:
                return ParsedOutput(content=text, ill_formed=True)
            call, position = found
            calls.append(call)
            while position < len(rest) and rest[position] in "\n;":
                position += 1
        return ParsedOutput(content=content, tool_calls=tuple(calls))

    def write_output(
        self,
        reasoning: str | None,
        content: str,
        calls: list[tuple[str, dict[str, Any]]],
        loose: frozenset[int],
        prompt: str,
    ) -> str:
        """No reasoning (Llama 3 writes none); each call a JSON line after the content."""
        lines = [content] if content or not calls else []
        for i, (name, arguments) in enumerate(calls):
            separators = _LOOSE_JSON if i in loose else _JSON
            lines.append(json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False, separators=separators))
        return "\n".join(lines) + _EOT

    def server_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A template without tool syntax gets each call back as the JSON line the model wrote (re-serialized)."""
        out = []
        for message in messages:
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            if calls:
                lines = [str(message.get("content") or "")] if message.get("content") else []
                for call in calls:
                    function = call["function"]
                    try:
                        arguments = json.loads(function["arguments"])
                    except (TypeError, ValueError):
                        arguments = function["arguments"]
                    lines.append(json.dumps({"name": function["name"], "parameters": arguments}, ensure_ascii=False))
                message = {"role": "assistant", "content": "\n".join(lines)}
            out.append(message)
        return out


def _read_call(text: str, start: int) -> tuple[ToolCall, int] | None:
    """The call object at ``start`` and the offset after it."""
    try:
        value, end = json.JSONDecoder().raw_decode(text, start)
    except ValueError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("parameters", value.get("arguments", {}))
    return ToolCall(value["name"], arguments), end
