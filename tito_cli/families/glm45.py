"""GLM-4.5 / 4.6: ``<think>`` reasoning, tool calls as ``<tool_call>NAME`` with ``<arg_key>``/``<arg_value>`` pairs.

A template-only family here (no tokenizer obtainable offline; ``fixtures/templates/glm-4.6.jinja``):
the template keeps reasoning only after the last user message (``<think></think>`` before it),
``.strip()``s content, and writes each argument back as a key/value pair, non-strings through
``tojson(ensure_ascii=False)``.  A string argument and a JSON one are told apart by whether the value
reads as JSON (servers use the tool's schema; the parser has none).
"""

from __future__ import annotations

import json
import re
from typing import Any

from .base import FamilyProfile, Markers, ParsedOutput, ToolCall

__all__ = ["Glm45"]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


class Glm45(FamilyProfile):
    name = "glm45"
    summary = "GLM-4.5 / 4.6: <think> reasoning, <tool_call>NAME with <arg_key>/<arg_value> pairs"
    hub_names = (r"zai-org/GLM-4\.[5-9]", r"THUDM/GLM-4\.[5-9]")
    reasoning = Markers(_THINK_OPEN, _THINK_CLOSE)
    tool_call = Markers(_OPEN, _CLOSE)
    end_of_turn = ("<|user|>", "<|observation|>", "<|endoftext|>")
    message_starts = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")
    trims_content = True
    tokenizer_marks = ("[gMASK]", "<|assistant|>", "<|observation|>")

    def read_tool_call(self, text: str, start: int) -> Any:
        body, closed, _ = text[start + len(_OPEN) :].partition(_CLOSE)
        call = _read_call(body) if closed else None
        return None if call is None else (call.name, call.arguments)

    def parse_output(self, text: str) -> ParsedOutput:
        """Reasoning in the think block; each ``<tool_call>`` block a call; the text before the first, content."""
        for end in self.end_of_turn:
            if text.endswith(end):
                text = text[: -len(end)]
                break
        reasoning = None
        head, closed, rest = text.partition(_THINK_CLOSE)
        if closed and _THINK_OPEN in head:
            reasoning, text = head.split(_THINK_OPEN, 1)[1], rest
        content, opened, _ = text.partition(_OPEN)
        if not opened:
            return ParsedOutput(content=text.strip(), reasoning=reasoning)
        calls: list[ToolCall] = []
        for block in text[len(content) :].split(_OPEN)[1:]:
            body, ended, _ = block.partition(_CLOSE)
            call = _read_call(body) if ended else None
            if call is None:
                return ParsedOutput(content=text, reasoning=reasoning, ill_formed=True)
            calls.append(call)
        return ParsedOutput(content=content.strip(), reasoning=reasoning, tool_calls=tuple(calls))


def _read_call(body: str) -> ToolCall | None:
    name, _, pairs = body.partition("\n")
    name = name.strip()
    if not name:
        return None
    arguments: dict[str, Any] = {}
    for key, value in _PAIR.findall(pairs):
        try:
            arguments[key] = json.loads(value)
        except ValueError:
            arguments[key] = value
    return ToolCall(name, arguments)
