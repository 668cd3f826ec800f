"""The demo model's script: what a tool-using Qwen3 agent answers, decided from the conversation alone.

A request's conversation reaches the script as the chat messages and tools (vLLM's chat wire) or as the
prompt text the gateway rendered with Qwen3's template (SGLang's ``/generate``); :func:`read_conversation`
turns either into the task (the last user message holding one; a client's other user messages, such as
Claude Code's reminders, are context), the tools offered and the
tool results since the task. :func:`demo_agent` then plays three steps for a task such as
``Create a file named hello.txt containing 'hello from tito', then read it back.``:

1. a call to the client's shell tool writing the file (Claude Code's ``Bash``, Codex's ``exec_command``
   or ``shell``);
2. after its result, a call reading the file back (``cat``);
3. after that result, a final text answer quoting what the file holds.

A task it cannot read, or a client without a shell tool, gets one text answer saying what it can do.
The output is Qwen3's raw text (``<think>`` reasoning, ``<tool_call>`` JSON blocks); the server
tokenizes it.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Conversation", "Messages", "demo_agent", "qwen3_output", "read_conversation"]

#: "create a file named NAME containing 'TEXT'" (also: write, called, with the content/text, any quotes).
TASK = re.compile(
    r"\b(?:create|write)\s+(?:a\s+|the\s+)?file\s+(?:named\s+|called\s+)?[`'\"]?(?P<name>[\w./-]+?)[`'\"]?\s+"
    r"(?:containing|with\s+(?:the\s+)?(?:content|text))\s+(?:the\s+text\s+)?"
    r"(?P<quote>[`'\"])(?P<content>[^\n]*?)(?P=quote)",
    re.IGNORECASE,
)

#: What the demo says when it cannot read a task.
HELP = (
    "I am tito's demo model: I only follow tasks such as \"Create a file named hello.txt containing "
    "'hello from tito', then read it back.\", with the client's shell tool."
)


def qwen3_output(content: str = "", reasoning: str | None = None, calls: Sequence[tuple[str, Any]] = ()) -> str:
    """The raw text Qwen3 writes for a reply: reasoning block, content, then one block per tool call."""
    text = f"<think>\n{reasoning}\n</think>\n\n" if reasoning is not None else ""
    text += content
    for name, arguments in calls:
        block = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
        text += ("\n" if text and not text.endswith("\n") else "") + f"<tool_call>\n{block}\n</tool_call>"
    return text


@dataclass
class Conversation:
    """What the script reads of a request: the task, the tools offered, the tool results since the task."""

    task: str = ""
    tools: list[str] = field(default_factory=list)
    results: list[str] = field(default_factory=list)

    def user(self, text: str) -> None:
        """A user message: a new task (results start over) when it holds one; else context (reminders)."""
        if TASK.search(text) or not self.task:
            self.task, self.results = text, []


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    name = (function if isinstance(function, dict) else tool).get("name")
    return name if isinstance(name, str) else None


def _from_messages(messages: list[dict[str, Any]], tools: Any) -> Conversation:
    conversation = Conversation(tools=[n for n in map(_tool_name, tools or []) if n])
    for message in messages:
        if message.get("role") == "user":
            conversation.user(_text(message.get("content")))
        elif message.get("role") == "tool":
            conversation.results.append(_text(message.get("content")))
    return conversation


_BLOCK = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|\Z)", re.DOTALL)
_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)  # (the template names <tools></tools> first)
_RESPONSE = re.compile(r"<tool_response>\n?(.*?)\n?</tool_response>", re.DOTALL)


def _from_qwen3_prompt(prompt: str) -> Conversation:
    conversation = Conversation()
    for role, body in _BLOCK.findall(prompt):
        listed = _TOOLS.search(body) if role == "system" else None
        if listed is not None:
            for line in listed.group(1).splitlines():
                try:
                    name = _tool_name(json.loads(line))
                except ValueError:
                    continue
                if name:
                    conversation.tools.append(name)
        elif role == "user":
            responses = _RESPONSE.findall(body)
            if responses:
                conversation.results.extend(responses)
            else:
                conversation.user(body)
    return conversation


class Messages(list[dict[str, Any]]):
    """A chat request's messages as a script receives them, with the request's ``tools`` beside them."""

    def __init__(self, messages: Any, tools: Any = None) -> None:
        super().__init__(messages)
        self.tools = tools


def read_conversation(conversation: Any) -> Conversation:
    """The script's view of a request: from chat messages (and their tools), or from Qwen3 prompt text."""
    if isinstance(conversation, str):
        return _from_qwen3_prompt(conversation)
    return _from_messages(list(conversation), getattr(conversation, "tools", None))


def _shell_call(tools: list[str], command: str, description: str) -> tuple[str, dict[str, Any]] | None:
    """A call running ``command`` with the client's shell tool, in that tool's argument shape."""
    if "Bash" in tools:  # Claude Code
        return "Bash", {"command": command, "description": description}
    if "exec_command" in tools:  # Codex
        return "exec_command", {"cmd": command}
    if "shell" in tools:  # Codex's older shell tool
        return "shell", {"command": ["bash", "-lc", command]}
    return None


def demo_agent(conversation: Any) -> str:
    """Qwen3's raw output for the request: the next tool call of the file task, or the final answer."""
    seen = read_conversation(conversation)
    task = TASK.search(seen.task)
    if task is None:
        return qwen3_output(HELP, reasoning="The task is not one I was scripted for.")
    name, content = task["name"], task["content"]
    step = len(seen.results)
    if step == 0:
        command = f"printf '%s\\n' {shlex.quote(content)} > {shlex.quote(name)}"
        call = _shell_call(seen.tools, command, f"Write {name}")
        reasoning = f"I will write {name} with the shell."
    elif step == 1:
        call = _shell_call(seen.tools, f"cat {shlex.quote(name)}", f"Read {name} back")
        reasoning = f"{name} is written; now I read it back."
    else:
        call = None
        reasoning = "The file was read back."
    if call is None and step < 2:
        return qwen3_output(f"I need a shell tool to write {name}, and this client offers none.", reasoning)
    if call is not None:
        return qwen3_output(reasoning=reasoning, calls=[call])
    if content in seen.results[-1]:
        return qwen3_output(f"{name} holds: {content}", reasoning)
    return qwen3_output(f"{name} was written, but reading it back printed: {seen.results[-1].strip()[:200]}", reasoning)
