"""One-line descriptions of chat messages and tree nodes, shared by every view."""

from __future__ import annotations

import json
from typing import Any

from ..algorithm.tree import Node

__all__ = ["message_preview", "node_kind"]


def _one_line(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


def message_preview(message: Any, width: int = 60) -> str:
    """Content text, tool-call names and a reasoning marker, on one line."""
    if message is None:
        return "(no message)"
    if not isinstance(message, dict):
        return _one_line(json.dumps(message, ensure_ascii=False), width)
    parts: list[str] = []
    if message.get("reasoning_content"):
        parts.append("[reasoning]")
    content = message.get("content")
    if isinstance(content, list):  # content parts
        content = " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    if content:
        parts.append(str(content))
    calls = message.get("tool_calls") or []
    if calls:
        names = []
        for call in calls:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            names.append(str(fn.get("name", "?")) if isinstance(fn, dict) else "?")
        parts.append("→ " + ", ".join(names))
    return _one_line(" ".join(parts), width) if parts else "(empty)"


def node_kind(node: Node) -> str:
    """``generated``, ``merged`` (absorbed a rewrite) or ``routing`` (never trained)."""
    if node.turn is not None:
        return "generated"
    if node.merged_rewrite is not None:
        return "merged"
    return "routing"
