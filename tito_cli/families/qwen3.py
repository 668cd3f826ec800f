"""Qwen3 (and Qwen3.5): ChatML turns, ``<think>`` reasoning, ``<tool_call>`` JSON blocks."""

from __future__ import annotations

import json
import re
from typing import Any

from .base import FamilyProfile, Markers, ParsedOutput, ToolCall

__all__ = ["Qwen3"]

_THINK_OPEN, _THINK_CLOSE = "<think>\n", "\n</think>\n\n"
_TOOL_OPEN, _TOOL_CLOSE = "<tool_call>", "</tool_call>"
#: Tool-call arguments as the template writes them (``tojson``), and without spaces, as models sometimes do.
_JSON, _LOOSE_JSON = (", ", ": "), (",", ":")
_TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)


class Qwen3(FamilyProfile):
    name = "qwen3"
    summary = "Qwen3 / Qwen3.5: ChatML, <think> reasoning, <tool_call> JSON"
    hub_names = (r"Qwen/Qwen3", r"Qwen/QwQ")
    reasoning = Markers("<think>", "</think>")
    tool_call = Markers("<tool_call>", "</tool_call>")
    end_of_turn = ("<|im_end|>",)
    message_starts = ("<|im_start|>",)
    tokenizer_marks = ("<|im_start|>", "<think>", "<tool_call>")

    def reasoning_block(self, reasoning: str) -> str:
        return f"{_THINK_OPEN}{reasoning}{_THINK_CLOSE.rstrip()}"

    def read_tool_call(self, text: str, start: int) -> Any:
        """The JSON object of the ``<tool_call>`` block at ``start``."""
        body, closed, _ = text[start + len(_TOOL_OPEN) :].partition(_TOOL_CLOSE)
        if not closed:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None

    def write_output(
        self,
        reasoning: str | None,
        content: str,
        calls: list[tuple[str, dict[str, Any]]],
        loose: frozenset[int],
        prompt: str,
    ) -> str:
        parts = []
        if reasoning:
            parts.append(f"{_THINK_OPEN}{reasoning}{_THINK_CLOSE}")
        parts.append(content)
        for i, (name, arguments) in enumerate(calls):
            if content or i:
                parts.append("\n")
            written = json.dumps(arguments, ensure_ascii=False, separators=_LOOSE_JSON if i in loose else _JSON)
            parts.append(f'<tool_call>\n{{"name": "{name}", "arguments": {written}}}\n</tool_call>')
        parts.append("<|im_end|>")
        return "".join(parts)

    def parse_output(self, text: str) -> ParsedOutput:
        """Reasoning between the think markers; each ``<tool_call>`` block whose JSON reads becomes a call.

        The text before the first call is the content.  A block that does not read (truncated, not
        JSON, no name) leaves every call in the content and marks the output ill-formed, as Qwen's
        server parsers keep such text.
        """
        for end in self.end_of_turn:
            if text.endswith(end):
                text = text[: -len(end)]
        reasoning = None
        ill_formed = False
        if text.startswith(_THINK_OPEN):
            body, closed, rest = text[len(_THINK_OPEN) :].partition(_THINK_CLOSE)
            reasoning, text = (body, rest) if closed else (body, "")
            ill_formed = not closed
        calls: list[ToolCall] = []
        first_call = None
        for match in _TOOL_CALL.finditer(text):
            try:
                call = json.loads(match.group(1))
                name, arguments = call["name"], call["arguments"]
                if not isinstance(name, str):
                    raise TypeError(name)
            except (ValueError, KeyError, TypeError):
                return ParsedOutput(content=text, reasoning=reasoning, ill_formed=True)
            if first_call is None:
                first_call = match.start()
            calls.append(ToolCall(name, arguments))
        if first_call is None:
            # An opened block never closed (a cut output) is text the parser could not read.
            return ParsedOutput(content=text, reasoning=reasoning, ill_formed=ill_formed or "<tool_call>" in text)
        content = text[:first_call]
        content = content[:-1] if content.endswith("\n") else content
        return ParsedOutput(content=content, reasoning=reasoning, tool_calls=tuple(calls), ill_formed=ill_formed)
