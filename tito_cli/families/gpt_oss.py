"""gpt-oss: the harmony format, messages on channels (``analysis``, ``commentary``, ``final``).

The prompt ends with ``<|start|>assistant``; the model writes messages, each
``<|channel|>NAME[ to=RECIPIENT][ <|constrain|>json]<|message|>BODY`` and an end: ``<|end|>`` (more
follows), ``<|call|>`` (a tool call: ``commentary to=functions.NAME``), ``<|return|>`` (the answer, in
``final``), the next message opening with ``<|start|>assistant``.

The official template (``_data/templates/gpt-oss.jinja``, from ``openai/gpt-oss-20b``) re-renders
history its own way: a call as ``<|start|>assistant to=functions.NAME<|channel|>commentary
json<|message|>`` with its arguments through ``tojson`` (so every turn after a tool call drifts there),
only the first call of a message, the ``analysis`` of a call kept until a ``final`` answer follows and
dropped after, ``<|return|>`` as ``<|end|>``, and the date in the system message (``strftime_now``).
"""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from .base import FamilyProfile, Markers, ParsedOutput, ToolCall

__all__ = ["GptOss"]

_START, _CHANNEL, _MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
_END, _CALL, _RETURN = "<|end|>", "<|call|>", "<|return|>"
_ENDS = re.compile(r"<\|end\|>|<\|call\|>|<\|return\|>")
_RECIPIENT = re.compile(r"to=([^\s<]+)")
#: Arguments as the template writes them (``tojson``), and without spaces, as models sometimes do.
_JSON, _LOOSE_JSON = (", ", ": "), (",", ":")


class GptOss(FamilyProfile):
    name = "gpt-oss"
    summary = "gpt-oss: harmony channels (analysis, commentary to=functions.X, final)"
    hub_names = (r"openai/gpt-oss",)
    reasoning = Markers(f"{_CHANNEL}analysis{_MESSAGE}", _END)
    tool_call = Markers(_START, _CALL)
    end_of_turn = (_RETURN, _CALL, _END)
    message_starts = (_START,)
    template = "gpt-oss.jinja"
    rerenders_tool_calls = True
    tokenizer_marks = ("<|channel|>", "<|constrain|>", "<|call|>")

    def reasoning_block(self, reasoning: str) -> str:
        return f"{_CHANNEL}analysis{_MESSAGE}{reasoning}{_END}"

    def tool_call_start(self, text: str, at: int) -> int | None:
        """The message (from its ``<|start|>``) that ``at`` lies in, if it has not ended before ``at``."""
        opened = text.rfind(_START, 0, at)
        if opened < 0 or _ENDS.search(text, opened, at):
            return None
        return opened

    def read_tool_call(self, text: str, start: int) -> Any:
        """``(recipient, arguments)`` of the message at ``start``, when it is a call to a function."""
        header, sep, rest = text[start + len(_START) :].partition(_MESSAGE)
        body, ended, _ = rest.partition(_CALL)
        recipient = _RECIPIENT.search(header)
        if not (sep and ended and recipient) or _ENDS.search(body):
            return None
        try:
            return recipient.group(1), json.loads(body)
        except ValueError:
            return None

    def parse_output(self, text: str) -> ParsedOutput:
        """``analysis`` as reasoning, ``final`` (and recipient-less ``commentary``) as content, calls as calls.

        A message that is cut (no end) or a call whose arguments do not read leaves its text in the
        content and marks the output ill-formed.
        """
        reasoning: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        ill_formed = False
        for piece in text.split(_START):
            if not piece:
                continue
            header, sep, rest = piece.partition(_MESSAGE)
            match = _ENDS.search(rest)
            if not sep or match is None:
                content.append(piece)
                ill_formed = True
                continue
            body = rest[: match.start()]
            channel = header.partition(_CHANNEL)[2].split(" ", 1)[0]
            recipient = _RECIPIENT.search(header)
            if recipient is not None and recipient.group(1).startswith("functions."):
                try:
                    calls.append(ToolCall(recipient.group(1).removeprefix("functions."), json.loads(body)))
                except ValueError:
                    content.append(piece)
                    ill_formed = True
            elif channel == "analysis":
                reasoning.append(body)
            else:
                content.append(body)
        return ParsedOutput(
            content="".join(content),
            reasoning="\n\n".join(reasoning) if reasoning else None,
            tool_calls=tuple(calls),
            ill_formed=ill_formed,
        )

    def write_output(
        self,
        reasoning: str | None,
        content: str,
        calls: list[tuple[str, dict[str, Any]]],
        loose: frozenset[int],
        prompt: str,
    ) -> str:
        """Harmony as the model writes it: analysis first; a call's prose goes to analysis too.

        (The template refuses a call message with both content and reasoning, and renders the
        content of a call message as analysis: a harmony model says it there.)
        """
        messages = []
        thought = "\n\n".join(t for t in (reasoning, content if calls else None) if t)
        if thought:
            messages.append(f"{_CHANNEL}analysis{_MESSAGE}{thought}{_END}")
        for i, (name, arguments) in enumerate(calls):
            written = json.dumps(arguments, ensure_ascii=False, separators=_LOOSE_JSON if i in loose else _JSON)
            messages.append(f"{_CHANNEL}commentary to=functions.{name} <|constrain|>json{_MESSAGE}{written}{_CALL}")
        if not calls:
            messages.append(f"{_CHANNEL}final{_MESSAGE}{content}{_RETURN}")
        return f"{_START}assistant".join(messages)

    def server_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """As vLLM hands them over: reasoning in ``thinking``, call arguments parsed (the template applies tojson)."""
        out = []
        for message in messages:
            if message.get("role") == "assistant":
                message = dict(message)
                if "reasoning_content" in message:
                    message["thinking"] = message.pop("reasoning_content")
                if message.get("tool_calls"):
                    message["tool_calls"] = [_parsed_arguments(call) for call in message["tool_calls"]]
            out.append(message)
        return out

    def template_at(self, template: str, now: Any) -> str:
        """The system message's ``Current date:`` from ``now`` (a session crossing midnight drifts there)."""
        return template.replace('strftime_now("%Y-%m-%d")', json.dumps(now.strftime("%Y-%m-%d")))


def _parsed_arguments(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call["function"])
    with contextlib.suppress(TypeError, ValueError):  # not JSON: handed over as it is
        function["arguments"] = json.loads(function["arguments"])
    return {**call, "function": function}
