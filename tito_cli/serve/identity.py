"""Message identity (docs/spec.md §11.2): whether a client's replayed message is the one the gateway holds.

The canonical history (:mod:`.canonical`) continues a held turn only when the request replays it:
its messages up to the held answer are the held ones by :func:`same_message`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .prompt import Message

__all__ = ["continues", "same_message"]


def same_message(replayed: Message, held: Message) -> bool:
    """Whether a client's replayed message is the held one (docs/spec.md §11.2).

    Ignored, because clients legitimately change them on echo: keys other than the role, content,
    reasoning and tool calls (thinking signatures, ``cache_control``, tool-call and tool-result ids),
    whitespace around content and reasoning (templates strip it), how tool-call arguments are
    serialized (compared as JSON values), and reasoning the client left out (Chat Completions clients
    do not send it back).
    """
    if replayed.get("role") != held.get("role"):
        return False
    if _text(replayed.get("content")) != _text(held.get("content")):
        return False
    reasoning = _text(replayed.get("reasoning_content"))
    if reasoning and reasoning != _text(held.get("reasoning_content")):
        return False
    return _calls(replayed.get("tool_calls")) == _calls(held.get("tool_calls"))


def continues(messages: Sequence[Message], held: Sequence[Message], answer: Message) -> bool:
    """Whether ``messages`` replay ``held`` and ``answer`` (then go on)."""
    n = len(held)
    if len(messages) <= n:
        return False
    # An echo equal to the held message (a dict comparison, in C) is the same message; only the others
    # (an assistant message echoed in the client's shape) go through the identity's rules.
    echoed = messages[:n]
    if echoed != held and not all(m == h or same_message(m, h) for m, h in zip(echoed, held, strict=True)):
        return False
    return messages[n] == answer or same_message(messages[n], answer)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):  # content parts: their texts, in order
        return "".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content).strip()
    return json.dumps(content, sort_keys=True)


def _calls(calls: Any) -> list[tuple[str, Any]]:
    out = []
    for call in calls or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = arguments.strip()
        out.append((str(function.get("name")), arguments))
    return out
