"""Qwen3 (and Qwen3.5): ChatML turns, ``<think>`` reasoning, ``<tool_call>`` JSON blocks."""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from .base import FamilyProfile, Markers, ParsedOutput, ToolCall

__all__ = ["Qwen3"]

_THINK_OPEN, _THINK_CLOSE = "<think>\n", "\n</think>\n\n"
_TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)


class Qwen3(FamilyProfile):
    name = "qwen3"
    summary = "Qwen3 / Qwen3.5: ChatML, <think> reasoning, <tool_call> JSON"
    hub_names = (r"Qwen/Qwen3", r"Qwen/QwQ")
    reasoning = Markers("<think>", "</think>")
    tool_call = Markers("<tool_call>", "</tool_call>")
    end_of_turn = ("<|im_end|>",)

    _tokenizer_marks: ClassVar[tuple[str, ...]] = ("<|im_start|>", "<think>", "<tool_call>")

    @classmethod
    def recognises_tokenizer(cls, tokenizer: Any) -> bool:
        vocab = tokenizer.get_vocab()
        return all(mark in vocab for mark in cls._tokenizer_marks)

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
