"""DeepSeek-V3 and V3.1: full-width ``<｜…｜>`` markers, ``<think>`` reasoning, tool calls as raw argument strings.

One vocabulary serves both (V3.1 ships V3's ``tokenizer.json``); the templates differ:

* V3.1 (the one the simulator renders with, ``_data/templates/deepseek-v3.1.jinja``): a turn after a
  user message opens with ``<think>`` (thinking mode, the ``thinking`` variable) or ``</think>``; history
  turns are rendered without their reasoning (``</think>`` and the content); tool calls are
  ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGUMENTS<｜tool▁call▁end｜>`` with the stored argument string
  pasted as it is; after tool results no generation prompt is added (the model goes on writing).
* V3: never renders reasoning; each call is ``function<｜tool▁sep｜>NAME`` and the arguments in a
  json fence, again the raw string.

The parser reads both call forms.  Reasoning is what comes before ``</think>`` (the prompt opened the
block): a model in thinking mode writes it first.
"""

from __future__ import annotations

import json
from typing import Any

from .base import FamilyProfile, Markers, ParsedOutput, ToolCall

__all__ = ["DeepSeekV3"]

_CALLS_OPEN, _CALLS_CLOSE = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_CALL_OPEN, _CALL_CLOSE, _SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_END = "<｜end▁of▁sentence｜>"
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
#: Arguments as servers serialize them (``json.dumps``), and without spaces, as models sometimes write them.
_JSON, _LOOSE_JSON = (", ", ": "), (",", ":")


class DeepSeekV3(FamilyProfile):
    name = "deepseek-v3"
    summary = "DeepSeek-V3 / V3.1: <think> reasoning, <｜tool▁call▁begin｜> calls with raw argument strings"
    hub_names = (r"deepseek-ai/DeepSeek-V3", r"deepseek-ai/DeepSeek-R1")
    reasoning = Markers(_THINK_OPEN, _THINK_CLOSE)
    tool_call = Markers(_CALL_OPEN, _CALL_CLOSE)
    end_of_turn = (_END,)
    message_starts = ("<｜User｜>", "<｜Assistant｜>", "<｜tool▁output▁begin｜>")
    template = "deepseek-v3.1.jinja"
    tokenizer_marks = ("<｜begin▁of▁sentence｜>", _CALLS_OPEN, _SEP)

    def read_tool_call(self, text: str, start: int) -> Any:
        body, closed, _ = text[start + len(_CALL_OPEN) :].partition(_CALL_CLOSE)
        call = _read_call(body) if closed else None
        return None if call is None else (call.name, call.arguments)

    def parse_output(self, text: str) -> ParsedOutput:
        """Reasoning up to ``</think>``; the calls section, when every call in it reads; the rest is content.

        A section that is not closed (a cut output) or a call that does not read leaves the text as
        content and marks the output ill-formed, as DeepSeek's server parsers keep it.
        """
        if text.endswith(_END):
            text = text[: -len(_END)]
        reasoning = None
        head, closed, rest = text.partition(_THINK_CLOSE)
        if closed:
            reasoning, text = head.removeprefix(_THINK_OPEN), rest
        elif text.startswith(_THINK_OPEN):
            return ParsedOutput(content="", reasoning=text[len(_THINK_OPEN) :], ill_formed=True)
        content, opened, section = text.partition(_CALLS_OPEN)
        if not opened:
            return ParsedOutput(content=text, reasoning=reasoning)
        body, ended, _ = section.partition(_CALLS_CLOSE)
        calls: list[ToolCall] = []
        for piece in body.split(_CALL_CLOSE) if ended else ():
            if not piece:
                continue
            call = _read_call(piece.removeprefix(_CALL_OPEN)) if piece.startswith(_CALL_OPEN) else None
            if call is None:
                calls = []
                break
            calls.append(call)
        if not calls:
            return ParsedOutput(content=text, reasoning=reasoning, ill_formed=True)
        return ParsedOutput(content=content, reasoning=reasoning, tool_calls=tuple(calls))

    def write_output(
        self,
        reasoning: str | None,
        content: str,
        calls: list[tuple[str, dict[str, Any]]],
        loose: frozenset[int],
        prompt: str,
    ) -> str:
        """V3.1's format.  Reasoning only where the prompt opened it (thinking mode, after a user message)."""
        parts = [f"{reasoning or ''}{_THINK_CLOSE}"] if prompt.endswith(_THINK_OPEN) else []
        parts.append(content)
        if calls:
            parts.append(_CALLS_OPEN)
            for i, (name, arguments) in enumerate(calls):
                written = json.dumps(arguments, ensure_ascii=False, separators=_LOOSE_JSON if i in loose else _JSON)
                parts.append(f"{_CALL_OPEN}{name}{_SEP}{written}{_CALL_CLOSE}")
            parts.append(_CALLS_CLOSE)
        parts.append(_END)
        return "".join(parts)

    def server_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Call arguments as JSON strings: DeepSeek's templates paste them into the text as they are."""
        out = []
        for message in messages:
            calls = message.get("tool_calls") if message.get("role") == "assistant" else None
            if calls and any(not isinstance(c["function"].get("arguments"), str) for c in calls):
                message = {**message, "tool_calls": [_string_arguments(c) for c in calls]}
            out.append(message)
        return out

    def template_kwargs(self, *, thinking: bool) -> dict[str, Any]:
        return {"thinking": thinking}


def _string_arguments(call: dict[str, Any]) -> dict[str, Any]:
    arguments = call["function"].get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {**call, "function": {**call["function"], "arguments": arguments}}


def _read_call(body: str) -> ToolCall | None:
    """``NAME<｜tool▁sep｜>ARGS`` (V3.1) or ``function<｜tool▁sep｜>NAME`` and a json fence (V3)."""
    name, sep, arguments = body.partition(_SEP)
    if not sep:
        return None
    if name == "function" and "\n```json\n" in arguments:
        name, _, fenced = arguments.partition("\n```json\n")
        arguments = fenced.removesuffix("```").removesuffix("\n")
    try:
        return ToolCall(name, json.loads(arguments)) if name else None
    except ValueError:
        return None
