"""Kimi-K2 (Instruct and Thinking): ``<think>`` reasoning, calls in a section of id'd blocks.

A template-only family here (its tokenizer is a tiktoken model with custom code;
``fixtures/templates/kimi-k2-thinking.jinja``).  The model writes
``<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{…}
<|tool_call_end|>…<|tool_calls_section_end|>``; the template writes each call back under the id the
client kept (``tool_call['id']``) and tool results as ``## Return of ID``, and keeps reasoning only
after the last assistant message without tool calls.  Calls are compared by their arguments: an id
re-written by the client is the same call re-rendered.
"""

from __future__ import annotations

import json
from typing import Any

from .base import FamilyProfile, Markers, ParsedOutput, ToolCall

__all__ = ["KimiK2"]

_SECTION_OPEN, _SECTION_CLOSE = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
_CALL_OPEN, _ARGS, _CALL_CLOSE = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


class KimiK2(FamilyProfile):
    name = "kimi-k2"
    summary = "Kimi-K2 / K2-Thinking: <think> reasoning, <|tool_call_begin|>functions.NAME:IDX calls"
    hub_names = (r"moonshotai/Kimi-K2",)
    reasoning = Markers("<think>", "</think>")
    tool_call = Markers(_CALL_OPEN, _CALL_CLOSE)
    end_of_turn = ("<|im_end|>",)
    message_starts = ("<|im_system|>", "<|im_user|>", "<|im_assistant|>")
    tokenizer_marks = ("<|im_assistant|>", _SECTION_OPEN, _ARGS)

    def read_tool_call(self, text: str, start: int) -> Any:
        body, closed, _ = text[start + len(_CALL_OPEN) :].partition(_CALL_CLOSE)
        _, sep, arguments = body.partition(_ARGS)
        if not (closed and sep):
            return None
        try:
            return json.loads(arguments)
        except ValueError:
            return None

    def parse_output(self, text: str) -> ParsedOutput:
        if text.endswith("<|im_end|>"):
            text = text[: -len("<|im_end|>")]
        reasoning = None
        head, closed, rest = text.partition("</think>")
        if closed:
            reasoning, text = head.removeprefix("<think>"), rest
        content, opened, section = text.partition(_SECTION_OPEN)
        if not opened:
            return ParsedOutput(content=text, reasoning=reasoning)
        body, ended, _ = section.partition(_SECTION_CLOSE)
        calls: list[ToolCall] = []
        for piece in body.split(_CALL_CLOSE) if ended else ():
            if not piece.strip():
                continue
            ident, sep, arguments = piece.strip().removeprefix(_CALL_OPEN).partition(_ARGS)
            name = ident.removeprefix("functions.").rsplit(":", 1)[0]
            try:
                calls.append(ToolCall(name, json.loads(arguments)))
            except ValueError:
                calls = []
                break
            if not (sep and name):
                calls = []
                break
        if not calls:
            return ParsedOutput(content=text, reasoning=reasoning, ill_formed=True)
        return ParsedOutput(content=content, reasoning=reasoning, tool_calls=tuple(calls))
