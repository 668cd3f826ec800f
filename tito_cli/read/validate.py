"""Validation of one session's raw rows into :class:`~tito_cli.turns.Turn` objects.

A session whose rows break the contract (SPEC §2, §7) raises
:class:`~tito_cli.errors.InvalidSessionError` naming the file, row and
reason; only that session is lost.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrow import all_finite, same_values
from ..capture.provenance import read_provenance
from ..capture.records import JSON_WHITESPACE, check_json_type, check_logprob_count, check_prompt_messages, loads_json
from ..errors import InvalidSessionError
from ..turns import Message, MessageKey, Provenance, RowRef, Turn, message_key
from .columns import INT32_MAX, INT64_MAX, RawTurn, Text
from .rows import SessionRows

__all__ = ["parse_session"]


@dataclass(slots=True)
class _ParsedPrompt:
    messages: list[Message]
    keys: list[MessageKey]
    #: Number of the earlier prompt (in parse order) this one extends, and how
    #: many of its messages it shares (all of them); ``None``/0 when parsed whole.
    source: int | None
    shared: int


_JSON_SPACE = frozenset(JSON_WHITESPACE.encode())
_CLOSE = ord("]")


KeyFunction = Callable[[Any], MessageKey]


def _keys(messages: list[Any], key: KeyFunction) -> list[MessageKey]:
    # A message that is not an object gets a placeholder: parse_session rejects its session.
    return [key(m) if isinstance(m, dict) else "" for m in messages]


def _text(cell: Text | None, what: str) -> str | None:
    """A text cell as a str; ``ValueError`` naming the column if its bytes are not UTF-8."""
    if cell is None or isinstance(cell, str):
        return cell
    try:
        return cell.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{what} is not valid UTF-8 (byte {exc.start})") from None


def _decode(utf8: np.ndarray) -> str:
    text = _text(utf8, "prompt_messages")
    assert text is not None
    return text


class _MessageParser:
    """Parses ``prompt_messages`` JSON, reusing the previous turns' work.

    A session's prompts mostly extend the previous prompt by a few messages.
    When the raw JSON text starts with an earlier prompt's text minus its
    closing bracket, followed by a comma, only the new tail is parsed and
    keyed (JSON is parsed left to right, so the shared prefix means the same
    messages, as the same objects).  The texts stay UTF-8 bytes viewed in the
    decoded column: checking a candidate is one comparison of two views, and
    only the new tail is ever turned into a str (a prompt's text is the whole
    conversation, hundreds of kilobytes; copying each into a str cost more
    than all of the routing).  The result says which earlier prompt was
    extended, so that validation and routing can skip the shared messages too.
    """

    #: Earlier prompts a new one is checked against, newest first.  A sub-agent's turns
    #: come between two of its parent's: with 4, the parent's first prompt after a 4-turn
    #: sub-agent was parsed whole again (a third of the benchmark's JSON).  A candidate
    #: that differs costs a comparison up to its first difference, usually a few bytes, and
    #: the heads are views into row groups the session holds anyway.
    CANDIDATES = 16

    def __init__(self, key: KeyFunction) -> None:
        self._key = key
        # (head: the text up to its closing bracket, messages, keys, prompt number), newest first.
        self._recent: list[tuple[np.ndarray | None, list[Message], list[MessageKey], int]] = []

    def parse(self, raw: Text, tag: int) -> _ParsedPrompt:
        """``raw`` parsed; ``tag`` names it in later results' ``source`` (the caller's row position)."""
        if isinstance(raw, str):
            raw = np.frombuffer(raw.encode("utf-8"), dtype=np.uint8)
        parsed: _ParsedPrompt | None = None
        for head, prev_messages, prev_keys, number in self._recent:
            if head is None or len(raw) <= len(head) or not same_values(raw[: len(head)], head):
                continue
            try:
                # The head ends on a character boundary of its own text, so of this one too.
                rest = _decode(raw[len(head) :]).lstrip(JSON_WHITESPACE)  # (str.lstrip() would skip more)
            except ValueError:
                continue  # the full parse below reports the error at its true position
            if rest == "]":
                parsed = _ParsedPrompt(prev_messages, prev_keys, number, len(prev_messages))
                break
            if rest.startswith(","):
                try:
                    tail = loads_json("[" + rest[1:], "prompt_messages")
                except ValueError:
                    continue  # the full parse below reports the error at its true position
                if not tail:
                    # "[a, b,]": a trailing comma, not JSON.  Let the full parse say so.
                    continue
                keys = prev_keys + _keys(tail, self._key)
                parsed = _ParsedPrompt(prev_messages + tail, keys, number, len(prev_messages))
                break
        if parsed is None:
            messages = loads_json(_decode(raw), "prompt_messages")
            if not isinstance(messages, list):
                raise ValueError("prompt_messages is not a JSON array")
            keys = _keys(messages, self._key)
            parsed = _ParsedPrompt(messages, keys, None, 0)
        # The head is the text before the closing bracket (a view: nothing is copied).
        end = len(raw)
        while end and raw[end - 1] in _JSON_SPACE:
            end -= 1
        head = raw[: end - 1] if parsed.messages and end and raw[end - 1] == _CLOSE else None
        self._recent.insert(0, (head, parsed.messages, parsed.keys, tag))
        del self._recent[self.CANDIDATES :]
        return parsed


def _parse_json(cell: Text | None, what: str, expected: type | None) -> Any:
    raw = _text(cell, what)
    if raw is None:
        return None
    value = loads_json(raw, what)
    # JSON null means the same as a null cell: these columns are all nullable.
    if expected is not None:
        check_json_type(value, what, expected)
    return value


class _RepeatedCells:
    """A session's last parsed ``tools`` and ``metadata`` cells, reused for a row holding the same text.

    Both are usually the same in every row of a session, and the tools are
    kilobytes of schemas: parsed once, not once per turn.  The rows share the
    parsed value, which nothing downstream changes.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[Text, Any]] = {}

    def parse(self, cell: Text | None, what: str, expected: type) -> Any:
        if cell is None:
            return None
        last = self._last.get(what)
        if last is not None and _same_text(last[0], cell):
            return last[1]
        value = _parse_json(cell, what, expected)
        self._last[what] = (cell, value)
        return value


def _same_text(a: Text, b: Text) -> bool:
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return same_values(a, b)
    return isinstance(a, str) and isinstance(b, str) and a == b


def _ids(values: np.ndarray | None, what: str, in_range: bool) -> np.ndarray:
    if values is None:
        raise ValueError(f"{what} is null")
    # int32 values cannot exceed the upper bound: one pass over the ids, not two; and
    # none when the row group's statistics already bound them (index_pass._row_group_facts).
    too_big = values.dtype.itemsize > 4 or values.dtype.kind == "u"
    if not in_range and values.size and (values.min() < 0 or (too_big and values.max() > INT32_MAX)):
        bad = values[(values < 0) | (values > INT32_MAX)][0]
        raise ValueError(f"{what} holds {int(bad)}, outside 0..{INT32_MAX}")
    # Already int32 (the capture format): keep the view into the decoded column.
    return values.astype(np.int32, copy=False)


def parse_session(rows: SessionRows, key: KeyFunction = message_key) -> list[Turn]:
    """Validate one session's raw rows into turns (row order: ``seq``); raise on the first problem.

    ``key`` is the message identity the turns' prompt messages are keyed by
    (the policy's ``message_key``; SPEC §3's canonical JSON by default).

    A format-2 row that stores only the new part of its prompt (docs/spec.md
    §9) is rebuilt from its base turn, which is validated first wherever its
    row is; a broken reference rejects the session, naming the row.
    """
    session_rows = rows.rows
    parser = _MessageParser(key)
    repeated = _RepeatedCells()
    seen: dict[int, RowRef] = {}
    # The routed-experts row shape of the session's calls (one for all of them).
    experts_shape: list[tuple[int, int] | None] = [None]
    # seq -> position of its first row, for base_seq (a duplicate seq is reported when its row comes).
    positions: dict[int, int] = {}
    if any(raw.base_seq is not None for raw in session_rows):
        for position, raw in enumerate(session_rows):
            if raw.seq is not None:
                positions.setdefault(raw.seq, position)
    turns: list[Turn | None] = [None] * len(session_rows)
    for first in range(len(session_rows)):
        if turns[first] is not None:
            continue
        # Depth-first through the base references: a base is validated before the rows
        # stored against it (iteratively: a chain can be as long as the session).
        pending = [first]
        while pending:
            position = pending[-1]
            raw = session_rows[position]
            base: Turn | None = None
            try:
                if raw.base_seq is not None:
                    target = positions.get(raw.base_seq)
                    if target is None:
                        raise ValueError(f"base_seq {raw.base_seq} is not the seq of any turn of this session")
                    if target in pending:
                        cycle = [session_rows[p].seq for p in pending[pending.index(target) :]]
                        raise ValueError(
                            "base_seq references form a cycle (seq "
                            + " -> ".join(str(seq) for seq in [*cycle, raw.base_seq])
                            + ")"
                        )
                    base = turns[target]
                    if base is None:
                        pending.append(target)
                        continue
                turn = _turn(raw, parser, repeated, position, turns, base, seen, key)
                if raw.provenance is not None:
                    turn.provenance, experts_shape[0] = _provenance(raw, turn, experts_shape[0])
                turns[position] = turn
            except RecursionError:
                # Parsed, but too deep to key (message_key recurses once per level).
                raise InvalidSessionError(
                    "JSON nested too deeply", file=raw.source.file, row=raw.source.row, session_id=rows.session_id
                ) from None
            except ValueError as exc:
                raise InvalidSessionError(
                    str(exc), file=raw.source.file, row=raw.source.row, session_id=rows.session_id
                ) from None
            pending.pop()
    return [turn for turn in turns if turn is not None]


def _turn(
    raw: RawTurn,
    parser: _MessageParser,
    repeated: _RepeatedCells,
    position: int,
    turns: list[Turn | None],
    base: Turn | None,
    seen: dict[int, RowRef],
    key: KeyFunction,
) -> Turn:
    """One row validated into a turn; ``base`` is its format-2 base turn, already validated."""
    if raw.seq is None:
        raise ValueError("seq is null")
    if raw.seq > INT64_MAX:
        raise ValueError(f"seq {raw.seq} is beyond int64 (at most {INT64_MAX})")
    if raw.null_element is not None:
        column, at = raw.null_element
        raise ValueError(f"{column} holds a null at position {at}")
    if raw.seq in seen:
        raise ValueError(f"duplicate seq {raw.seq} (also at {seen[raw.seq]})")
    seen[raw.seq] = raw.source
    new_ids = _ids(raw.prompt_ids, "prompt_ids", raw.ids_in_range)
    output_ids = _ids(raw.output_ids, "output_ids", raw.ids_in_range)
    finish_reason = _text(raw.finish_reason, "finish_reason")
    if finish_reason is None:
        raise ValueError("finish_reason is null")
    if raw.prompt_messages is None:
        raise ValueError("prompt_messages is null")
    extends: tuple[Turn, int] | None = None
    shared_ids = 0
    if base is None:
        for name in ("shared_prompt_ids", "shared_messages"):
            if getattr(raw, name):
                raise ValueError(f"{name} is {getattr(raw, name)} but base_seq is null")
        parsed = parser.parse(raw.prompt_messages, position)
        messages, keys, checked = parsed.messages, parsed.keys, parsed.shared
        if parsed.source is not None:
            source = turns[parsed.source]
            # Every prompt the parser has seen became a turn (or the session was rejected).
            assert source is not None
            extends = (source, parsed.shared)
    else:
        shared_ids = _shared_ids(raw, base)
        messages, keys, checked = _rebuilt_messages(raw, base, key)
        extends = (base, checked) if checked else None
    # Messages shared with an earlier prompt were checked when it was parsed.
    check_prompt_messages(messages, checked)
    response = _parse_json(raw.response_message, "response_message", dict)
    tools = repeated.parse(raw.tools, "tools", list)
    metadata = repeated.parse(raw.metadata, "metadata", dict)
    logprobs = raw.output_logprobs
    if logprobs is not None and logprobs.size == 0:
        logprobs = None
    if logprobs is not None:
        check_logprob_count(logprobs.size, output_ids.size, len(messages))
        if not raw.logprobs_finite and not all_finite(logprobs):
            raise ValueError("output_logprobs holds NaN or infinity")
        logprobs = logprobs.astype(np.float32, copy=False)
    turn = Turn(
        seq=raw.seq,
        # A delta row's whole prompt is built from its base only when asked for (Turn.prompt_ids).
        prompt_ids=new_ids,
        output_ids=output_ids,
        output_logprobs=logprobs,
        finish_reason=finish_reason,
        prompt_messages=messages,
        response_message=response,
        tools=tools,
        metadata=metadata,
        source=raw.source,
        message_keys=keys,
        ill_formed=bool(raw.ill_formed),
        keyed_by=key,
        base=None if base is None else (base, shared_ids),
    )
    turn.extends = extends
    return turn


def _provenance(
    raw: RawTurn, turn: Turn, shape: tuple[int, int] | None
) -> tuple[Provenance | None, tuple[int, int] | None]:
    """A row's provenance cells checked (docs/spec.md §2), and the session's routed-experts row shape."""
    assert raw.provenance is not None
    versions, sampling, kind, *experts = raw.provenance
    outputs = len(turn.output_ids)
    return read_provenance(
        _text(versions, "weight_versions"),
        _text(sampling, "sampling"),
        _text(kind, "call_kind"),
        (experts[0], experts[1], experts[2], experts[3]),  # type: ignore[arg-type]
        turn.prompt_length + outputs,
        outputs,
        shape,
    )


def _shared_ids(raw: RawTurn, base: Turn) -> int:
    """How many of a format-2 row's prompt ids come from its base's prompt + output ids, checked."""
    shared = raw.shared_prompt_ids
    held = base.prompt_length + len(base.output_ids)
    if shared is None:
        raise ValueError("shared_prompt_ids is null but base_seq is set")
    if not 0 <= shared <= held:
        raise ValueError(
            f"shared_prompt_ids {shared} is outside 0..{held} (base seq {base.seq} has "
            f"{base.prompt_length} prompt + {len(base.output_ids)} output ids)"
        )
    return shared


def _rebuilt_messages(raw: RawTurn, base: Turn, key: KeyFunction) -> tuple[list[Message], list[MessageKey], int]:
    """A format-2 row's prompt messages, their keys, and how many were checked with the base's prompt."""
    shared = raw.shared_messages
    base_messages = base.prompt_messages
    available = len(base_messages) + (base.response_message is not None)
    if shared is None:
        raise ValueError("shared_messages is null but base_seq is set")
    if not 0 <= shared <= available:
        raise ValueError(
            f"shared_messages {shared} is outside 0..{available} (base seq {base.seq} has "
            f"{len(base_messages)} prompt messages"
            + (" and a response message)" if base.response_message is not None else " and no response message)")
        )
    assert raw.prompt_messages is not None
    new = _parse_json(raw.prompt_messages, "prompt_messages", list)
    if new is None:
        raise ValueError("prompt_messages is JSON null")
    from_prompt = min(shared, len(base_messages))
    messages = base_messages[:from_prompt]
    keys = base.keys(key)[:from_prompt]
    if shared > from_prompt:
        assert base.response_message is not None
        messages = [*messages, base.response_message]
        keys = [*keys, base.response_key(key)]
    return messages + new, keys + _keys(new, key), from_prompt
