"""Validation of one session's raw rows into :class:`~tito_cli.turns.Turn` objects.

A session whose rows break the contract (SPEC §2, §7) raises
:class:`~tito_cli.errors.InvalidSessionError` naming the file, row and
reason; only that session is lost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidSessionError
from .readpath import SessionRows
from .turns import Message, RowRef, Turn, canonical_json

__all__ = ["parse_session"]

INT32_MAX = 2**31 - 1

@dataclass(slots=True)
class _ParsedPrompt:
    messages: list[Message]
    keys: list[str]
    #: Number of the earlier prompt (in parse order) this one extends, and how
    #: many of its messages it shares (all of them); ``None``/0 when parsed whole.
    source: int | None
    shared: int


class _MessageParser:
    """Parses ``prompt_messages`` JSON, reusing the previous turns' work.

    A session's prompts mostly extend the previous prompt by a few messages.
    When the raw JSON text starts with an earlier prompt's text minus its
    closing bracket, followed by a comma, only the new tail is parsed and
    canonicalised (JSON is parsed left to right, so the shared prefix means
    the same messages, as the same objects).  Each earlier prompt's "head"
    (its text without the closing bracket) is cut once, when it is
    remembered, so checking a candidate is one prefix comparison, not a copy
    of a long prompt.  The result says which earlier prompt was extended, so
    that validation and routing can skip the shared messages too.
    """

    def __init__(self) -> None:
        self._recent: list[tuple[str | None, list[Message], list[str], int]] = []
        self._count = 0

    def parse(self, raw: str) -> _ParsedPrompt:
        parsed: _ParsedPrompt | None = None
        for head, prev_messages, prev_keys, number in self._recent:
            if head is None or not raw.startswith(head):
                continue
            rest = raw[len(head) :].lstrip()
            if rest == "]":
                parsed = _ParsedPrompt(prev_messages, prev_keys, number, len(prev_messages))
                break
            if rest.startswith(","):
                try:
                    tail = json.loads("[" + rest[1:])
                except json.JSONDecodeError:
                    continue  # the full parse below reports the error at its true position
                if not tail:
                    # "[a, b,]": a trailing comma, not JSON.  Let the full parse say so.
                    continue
                keys = prev_keys + [canonical_json(m) if isinstance(m, dict) else "" for m in tail]
                parsed = _ParsedPrompt(prev_messages + tail, keys, number, len(prev_messages))
                break
        if parsed is None:
            messages = json.loads(raw)
            if not isinstance(messages, list):
                raise ValueError("prompt_messages is not a JSON array")
            keys = [canonical_json(m) if isinstance(m, dict) else "" for m in messages]
            parsed = _ParsedPrompt(messages, keys, None, 0)
        # The head is the text before the closing bracket (one copy of the prompt).
        end = len(raw)
        while end and raw[end - 1] in " \t\r\n":
            end -= 1
        head = raw[: end - 1] if parsed.messages and end and raw[end - 1] == "]" else None
        self._recent.insert(0, (head, parsed.messages, parsed.keys, self._count))
        self._count += 1
        del self._recent[4:]
        return parsed


def _parse_json(raw: str | None, what: str, expected: type | None) -> Any:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON ({exc})") from None
    # JSON null means the same as a null cell: these columns are all nullable.
    if expected is not None and value is not None and not isinstance(value, expected):
        raise ValueError(f"{what} is not a JSON {'object' if expected is dict else 'array'}")
    return value


def _ids(values: np.ndarray | None, what: str) -> np.ndarray:
    if values is None:
        raise ValueError(f"{what} is null")
    # int32 values cannot exceed the upper bound: one pass over the ids, not two.
    too_big = values.dtype.itemsize > 4 or values.dtype.kind == "u"
    if values.size and (values.min() < 0 or (too_big and values.max() > INT32_MAX)):
        bad = values[(values < 0) | (values > INT32_MAX)][0]
        raise ValueError(f"{what} holds {int(bad)}, outside 0..{INT32_MAX}")
    # Already int32 (the capture format): keep the view into the decoded column.
    return values.astype(np.int32, copy=False)


def parse_session(rows: SessionRows) -> list[Turn]:
    """Validate one session's raw rows into turns (``seq`` order); raise on the first problem."""
    turns: list[Turn] = []
    parser = _MessageParser()
    seen: dict[int, RowRef] = {}
    for raw in rows.rows:
        try:
            if raw.seq is None:
                raise ValueError("seq is null")
            if raw.seq in seen:
                raise ValueError(f"duplicate seq {raw.seq} (also at {seen[raw.seq]})")
            seen[raw.seq] = raw.source
            prompt_ids = _ids(raw.prompt_ids, "prompt_ids")
            output_ids = _ids(raw.output_ids, "output_ids")
            if raw.finish_reason is None:
                raise ValueError("finish_reason is null")
            if raw.prompt_messages is None:
                raise ValueError("prompt_messages is null")
            try:
                parsed = parser.parse(raw.prompt_messages)
            except json.JSONDecodeError as exc:
                raise ValueError(f"prompt_messages is not valid JSON ({exc})") from None
            messages, keys = parsed.messages, parsed.keys
            # Messages shared with an earlier prompt were checked when it was parsed.
            for position in range(parsed.shared, len(messages)):
                message = messages[position]
                if not isinstance(message, dict):
                    raise ValueError(f"prompt message {position} is not a JSON object")
                if not isinstance(message.get("role"), str):
                    raise ValueError(f"prompt message {position} has no string 'role'")
            response = _parse_json(raw.response_message, "response_message", dict)
            tools = _parse_json(raw.tools, "tools", list)
            metadata = _parse_json(raw.metadata, "metadata", dict)
            logprobs = raw.output_logprobs
            if logprobs is not None and logprobs.size == 0:
                logprobs = None
            if logprobs is not None:
                if messages and logprobs.size != output_ids.size:
                    raise ValueError(
                        "output_logprobs length differs from output_ids length "
                        f"({logprobs.size} logprobs, {output_ids.size} output ids)"
                    )
                if not np.isfinite(logprobs).all():
                    raise ValueError("output_logprobs holds NaN or infinity")
                logprobs = logprobs.astype(np.float32, copy=False)
        except ValueError as exc:
            raise InvalidSessionError(
                str(exc), file=raw.source.file, row=raw.source.row, session_id=rows.session_id
            ) from None
        turns.append(
            Turn(
                seq=raw.seq,
                prompt_ids=prompt_ids,
                output_ids=output_ids,
                output_logprobs=logprobs,
                finish_reason=raw.finish_reason,
                prompt_messages=messages,
                response_message=response,
                tools=tools,
                metadata=metadata,
                source=raw.source,
                message_keys=keys,
            )
        )
        if parsed.source is not None:
            # Every parsed prompt became a turn (or the session was rejected), so the
            # parser's prompt numbers are positions in `turns`.
            turns[-1].extends = (turns[parsed.source], parsed.shared)
    return turns
