"""JSON for ``--json``: indented objects, but lists of numbers or strings on one line.

Token id lists run to thousands of entries; one id per line would make the
output unreadable and hard to diff.  Keys keep the order the builders give
them, which is fixed, so the output is stable.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["dumps"]


def _scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def dumps(value: Any, indent: int = 2) -> str:
    parts: list[str] = []
    _write(value, 0, indent, parts)
    return "".join(parts)


def _write(value: Any, level: int, indent: int, parts: list[str]) -> None:
    pad = " " * (indent * (level + 1))
    if isinstance(value, dict) and value:
        parts.append("{\n")
        for i, (key, item) in enumerate(value.items()):
            parts.append(f"{pad}{json.dumps(str(key), ensure_ascii=False)}: ")
            _write(item, level + 1, indent, parts)
            parts.append(",\n" if i < len(value) - 1 else "\n")
        parts.append(" " * (indent * level) + "}")
    elif isinstance(value, (list, tuple)) and value and not all(_scalar(v) for v in value):
        parts.append("[\n")
        for i, item in enumerate(value):
            parts.append(pad)
            _write(item, level + 1, indent, parts)
            parts.append(",\n" if i < len(value) - 1 else "\n")
        parts.append(" " * (indent * level) + "]")
    else:
        parts.append(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))
