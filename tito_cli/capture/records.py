"""The write contract (docs/spec.md §2, §7): what a turns row and a sessions row must be.

One set of record rules, used wherever a record is made or read back, so
that what one side accepts the others accept:

* :class:`~tito_cli.capture.writer.TurnLogWriter` checks every record with
  :func:`turn_row` and :func:`sessions_row` before it buffers it: a bad record
  raises ``ValueError`` in the caller and never reaches a file;
* the import driver (:mod:`tito_cli.capture.importing`) checks every turn of a
  session with :func:`turn_row` before the first is recorded: an importer
  accepts exactly what the writer accepts, and rejects the rest whole;
* the reader (:mod:`tito_cli.read.validate`) parses JSON with
  :func:`loads_json`, skips :data:`JSON_WHITESPACE` only, and checks the
  prompt messages, the JSON cells' types, the logprob count and the sessions
  metadata with :func:`check_prompt_messages`, :func:`check_json_type`,
  :func:`check_logprob_count` and :func:`check_sessions_metadata`: the writer
  refuses what a rebuild would reject a session for.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from ..schema import PROVENANCE_KEY

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "JSON_WHITESPACE",
    "JsonLike",
    "PromptMessages",
    "TurnRow",
    "check_json_type",
    "check_logprob_count",
    "check_prompt_messages",
    "check_sessions_metadata",
    "fast_json",
    "loads_json",
    "sessions_row",
    "stored_row",
    "strict_loads",
    "turn_row",
]

INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

#: JSON's whitespace (RFC 8259: space, tab, line feed, carriage return).  ``str.strip()`` takes
#: more (a form feed, a no-break space, any Unicode space), which no JSON parser skips.
JSON_WHITESPACE = " \t\r\n"


class PromptMessages:
    """A prompt's messages with each one's JSON text, for ``record_turn``: a growing conversation serialized once.

    Made only by :meth:`of` and :meth:`extend` (only the new messages serialized), which check each
    message as the writer would (an object with a string ``role``, strict JSON, UTF-8).  A text is
    ``json.dumps(message, ensure_ascii=False)``, what the writer makes of a list of dicts: the log holds the
    same bytes either way.  The messages must not be changed once given (the texts would no longer hold them).
    """

    __slots__ = ("_texts", "_values")

    def __init__(self, values: tuple[dict[str, Any], ...], texts: tuple[str, ...], _checked: object) -> None:
        if _checked is not _CHECKED:
            raise TypeError("make PromptMessages with PromptMessages.of() or .extend()")
        self._values = values
        self._texts = texts

    @classmethod
    def of(cls, messages: Sequence[dict[str, Any]]) -> PromptMessages:
        """``messages`` checked and serialized (``ValueError`` naming the message that is not storable)."""
        return _EMPTY.extend(messages)

    def extend(self, messages: Sequence[dict[str, Any]]) -> PromptMessages:
        """These messages followed by ``messages`` (only those are checked and serialized)."""
        values = tuple(messages)
        check_prompt_messages(values, offset=len(self._values))
        texts = []
        for index, message in enumerate(values, len(self._values)):
            texts.append(_json_text(message, f"prompt message {index}") or "")
            _check_text(texts[-1], f"prompt message {index}", required=True)
        return PromptMessages(self._values + values, self._texts + tuple(texts), _CHECKED)

    @property
    def values(self) -> list[dict[str, Any]]:
        return list(self._values)

    @property
    def texts(self) -> list[str]:
        """Each message's JSON text, in order."""
        return list(self._texts)

    def text(self) -> str:
        """The JSON array of the messages, as ``json.dumps(messages, ensure_ascii=False)`` writes it."""
        return "[" + ", ".join(self._texts) + "]"

    def __len__(self) -> int:
        return len(self._values)


_CHECKED = object()
_EMPTY = PromptMessages((), (), _CHECKED)

#: A JSON cell as a caller gives it: JSON text, or the value itself.
JsonLike = str | dict[str, Any] | list[Any] | None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# One decoder, built once: json.loads with an option builds a new one per call.
_STRICT_JSON = json.JSONDecoder(parse_constant=_refuse_constant)

#: Texts with more opening brackets than this go straight to ``json``: a text's nesting is at most its
#: count of ``[`` and ``{``, and below this count ``json`` cannot reach the recursion limit unless the
#: caller's stack already holds three quarters of it (see :func:`loads_json`).
FAST_JSON_BRACKETS = 256

_fast_decode: Any = None


def fast_json() -> Any:
    """msgspec's JSON decoder (one a process), imported on first use (a harness that never reads pays nothing)."""
    global _fast_decode
    if _fast_decode is None:
        import msgspec.json

        _fast_decode = msgspec.json.Decoder().decode
    return _fast_decode


def loads_json(text: str, what: str) -> Any:
    """``json.loads`` of strict JSON; ``ValueError`` naming ``what`` for anything else.

    Python's parser accepts ``NaN``, ``Infinity`` and ``-Infinity``, which are
    not JSON (a reader in any other language refuses them), and raises
    ``RecursionError`` for nesting deeper than the interpreter's recursion
    limit (about 1,000 levels by default): both are invalid input here.

    The value is msgspec's where msgspec reads the text (about 3x faster), and
    ``json``'s everywhere else: msgspec reads every strict JSON text as ``json``
    does (integers of any size, duplicate keys: the last value at the first
    key's place, ``-0.0``, floats rounded alike), and refuses the texts where
    they differ (``NaN``/``Infinity``, numbers beyond float64 such as ``1e400``,
    which ``json`` reads as infinity, lone surrogates, which ``json`` keeps, an
    integer past ``sys.get_int_max_str_digits()``).  msgspec reads a few levels
    deeper than ``json`` before its recursion limit, so a text that may nest
    deeply (more opening brackets than :data:`FAST_JSON_BRACKETS`, or than a
    quarter of the recursion limit) goes to ``json`` directly.  A text msgspec
    refuses is parsed by ``json``, whose value or error is the answer.
    ``tests/read/test_fast_json.py`` compares the two paths on generated texts.
    """
    if text.count("[") + text.count("{") <= min(FAST_JSON_BRACKETS, sys.getrecursionlimit() // 4):
        try:
            return fast_json()(text)
        except (ValueError, RecursionError):
            pass  # msgspec's errors (DecodeError, ValidationError) are ValueErrors; json says what is wrong
    return strict_loads(text, what)


def strict_loads(text: str, what: str) -> Any:
    """:func:`loads_json` by ``json`` alone: the fallback, and what the fast path is tested against."""
    try:
        return _STRICT_JSON.decode(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply to parse") from None
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON ({exc})") from None


def check_json_type(value: Any, what: str, expected: type) -> None:
    """``value`` (parsed) is a JSON object (``dict``) or array (``list``), or null: the cells are all nullable."""
    kinds: tuple[type, ...] = (list, tuple) if expected is list else (expected,)
    if value is not None and not isinstance(value, kinds):
        raise ValueError(f"{what} is not a JSON {'object' if expected is dict else 'array'}")


def check_prompt_messages(messages: Any, start: int = 0, *, offset: int = 0) -> None:
    """A prompt is a JSON array of objects, each with a string ``role`` (messages before ``start``: checked).

    ``offset``: where ``messages`` stand in the prompt (the index an error names is ``offset`` more).
    """
    if not isinstance(messages, (list, tuple)):
        raise ValueError("prompt_messages is not a JSON array")
    for index in range(start, len(messages)):
        message = messages[index]
        if not isinstance(message, dict):
            raise ValueError(f"prompt message {index + offset} is not a JSON object")
        if not isinstance(message.get("role"), str):
            raise ValueError(f"prompt message {index + offset} has no string 'role'")


def check_logprob_count(logprobs: int, outputs: int, messages: int) -> None:
    """Recorded logprobs (any) number the output ids, in a turn that is routed (SPEC §3 steps 1–2)."""
    if logprobs and messages and logprobs != outputs:
        raise ValueError(
            "output_logprobs length differs from output_ids length "
            f"({logprobs} logprobs, {outputs} output ids)"
        )


def check_sessions_metadata(value: Any) -> None:
    """A sessions row's metadata (parsed, not null): an object, without tito's key, that is strict JSON again.

    It is copied into every sample's metadata, under tito's own ``"tito"`` key: it must come out as
    strict JSON, UTF-8 (a lone surrogate, or ``1e400``, which parses as infinity, would not).
    """
    if not isinstance(value, dict):
        raise ValueError("sessions metadata is not a JSON object")
    if PROVENANCE_KEY in value:
        raise ValueError(
            f"sessions metadata has a key {PROVENANCE_KEY!r}, which tito reserves for each sample's "
            "provenance (rename it in the harness)"
        )
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"sessions metadata holds a lone surrogate ({exc.object[exc.start:exc.end]!a})") from None
    except ValueError:
        raise ValueError("sessions metadata holds a number beyond float64 (1e400 reads as infinity)") from None
    except RecursionError:
        raise ValueError("sessions metadata is nested too deeply") from None


def _json_text(value: JsonLike, what: str) -> str | None:
    """Store strings as given (already JSON); serialise anything else as strict JSON."""
    if value is None or isinstance(value, str):
        return value
    try:
        # allow_nan=False: NaN and Infinity are not JSON, and no reader of the log would accept them.
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"{what} cannot be stored as JSON ({exc})") from None


def _json_value(value: JsonLike, what: str) -> Any:
    """The value a JSON cell holds: text parsed as the reader will parse it, anything else as given."""
    return loads_json(value, what) if isinstance(value, str) else value


def _one_dimensional(value: Sequence[float] | np.ndarray, what: str, items: str) -> np.ndarray:
    """``value`` as a numpy array of one dimension (any dtype yet), or ``ValueError`` naming ``what``.

    Anything but a numpy array is copied (a list is anyway; an ``array.array`` would otherwise be viewed,
    and its owner could change the ids of a buffered row).
    """
    if value is None:
        raise ValueError(f"{what} is null")
    try:
        array = np.asarray(value) if isinstance(value, np.ndarray) else np.array(value)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not a sequence of {items} ({exc})") from None
    if array.ndim != 1:
        raise ValueError(f"{what} must be 1-D, got {array.ndim} dimensions")
    return array


def _token_ids(value: Sequence[int] | np.ndarray, what: str) -> np.ndarray:
    """``value`` as int32 ids, exactly: a 1-D sequence of integers in 0..2**31-1, or ``ValueError``.

    ``np.asarray(value, dtype=np.int32)`` would wrap 2**32 + 5 to 5, truncate
    1.7 to 1 and take a row of a 2-D array: ids that were never generated.
    """
    array = _one_dimensional(value, what, "integers")
    if array.size == 0:
        return np.zeros(0, dtype=np.int32)
    if array.dtype.kind == "O" and all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in array):
        # Python ints beyond int64: out of range, said below with the value itself.
        bad = next((int(v) for v in array if not 0 <= int(v) <= INT32_MAX), None)
        if bad is not None:
            raise ValueError(f"{what} holds {bad}, outside 0..{INT32_MAX}")
        return array.astype(np.int32)
    if array.dtype.kind not in "iu":
        raise ValueError(f"{what} must hold integers, got {array.dtype}")
    if int(array.min()) < 0 or int(array.max()) > INT32_MAX:
        bad = array[(array < 0) | (array > INT32_MAX)][0]
        raise ValueError(f"{what} holds {int(bad)}, outside 0..{INT32_MAX}")
    return array.astype(np.int32, copy=False)


def _logprobs(value: Sequence[float] | np.ndarray | None) -> np.ndarray | None:
    if value is None:
        return None
    array = _one_dimensional(value, "output_logprobs", "numbers")
    if array.size == 0:
        return np.zeros(0, dtype=np.float32)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"output_logprobs must hold numbers, got {array.dtype}")
    result = array.astype(np.float32)
    if not np.isfinite(result).all():
        raise ValueError("output_logprobs holds NaN or infinity (or a value beyond float32)")
    return result


def _check_text(value: object, what: str, *, required: bool) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a str, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{what} is not encodable as UTF-8 ({exc.reason} at {exc.start})") from None


def _check_int(value: object, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{what} must be an int, got {type(value).__name__}")
    if not -INT64_MAX - 1 <= int(value) <= INT64_MAX:
        raise ValueError(f"{what} {int(value)} is beyond int64")


@dataclass(slots=True)
class TurnRow:
    """A turns row that keeps the contract, as the writer buffers it (before its ``seq`` and format 2's delta)."""

    row: dict[str, Any]
    #: The prompt messages and the response message as values (parsed when given as text;
    #: as given, by :func:`stored_row`).
    messages: Any
    response: Any
    #: The row's size in the buffer (ids at 4 bytes, texts by length).
    size: int


def turn_row(
    session_id: str,
    prompt_ids: Sequence[int] | np.ndarray,
    output_ids: Sequence[int] | np.ndarray,
    output_logprobs: Sequence[float] | np.ndarray | None,
    finish_reason: str,
    prompt_messages: JsonLike | PromptMessages,
    response_message: JsonLike,
    tools: JsonLike = None,
    metadata: JsonLike = None,
    *,
    seq: int | None = None,
    timestamp: datetime | None = None,
    ill_formed: bool = False,
) -> TurnRow:
    """One generation call checked against the contract; ``ValueError`` naming the field otherwise.

    A turn keeps the contract when the log can hold it exactly
    (:func:`stored_row`) and a rebuild accepts it: the JSON cells parse as the
    reader parses them, the prompt is an array of objects with a string
    ``role``, the response and the metadata are objects, the tools an array
    (each may be null but the prompt), and logprobs, when recorded in a turn
    with prompt messages, are one per output id.
    """
    stored = stored_row(
        session_id,
        prompt_ids,
        output_ids,
        output_logprobs,
        finish_reason,
        prompt_messages,
        response_message,
        tools,
        metadata,
        seq=seq,
        timestamp=timestamp,
        ill_formed=ill_formed,
    )
    messages: Any
    if isinstance(prompt_messages, PromptMessages):
        messages = prompt_messages  # checked when it was made
    else:
        messages = _json_value(prompt_messages, "prompt_messages")
        check_prompt_messages(messages)
    response = _json_value(response_message, "response_message")
    check_json_type(response, "response_message", dict)
    check_json_type(_json_value(tools, "tools"), "tools", list)
    check_json_type(_json_value(metadata, "metadata"), "metadata", dict)
    logprobs = stored.row["output_logprobs"]
    check_logprob_count(0 if logprobs is None else logprobs.size, stored.row["output_ids"].size, len(messages))
    return TurnRow(stored.row, messages, response, stored.size)


def stored_row(
    session_id: str,
    prompt_ids: Sequence[int] | np.ndarray,
    output_ids: Sequence[int] | np.ndarray,
    output_logprobs: Sequence[float] | np.ndarray | None,
    finish_reason: str,
    prompt_messages: JsonLike | PromptMessages,
    response_message: JsonLike,
    tools: JsonLike = None,
    metadata: JsonLike = None,
    *,
    seq: int | None = None,
    timestamp: datetime | None = None,
    ill_formed: bool = False,
) -> TurnRow:
    """The cells of a turns row as the log stores them, or ``ValueError`` for a cell it cannot hold exactly.

    Ids are 1-D sequences of integers in 0..2**31-1; logprobs are finite; the
    session id and finish reason are strings; ``seq`` is a non-negative
    int64; JSON values serialise as strict JSON, and text is stored as given;
    every text is UTF-8.  Whether a rebuild accepts the row is
    :func:`turn_row`'s to check; a row this accepts and that refuses is what a
    foreign writer may leave in a log (the tests write such rows this way).
    """
    _check_text(session_id, "session_id", required=True)
    prompt = _token_ids(prompt_ids, "prompt_ids")
    output = _token_ids(output_ids, "output_ids")
    logprobs = _logprobs(output_logprobs)
    _check_text(finish_reason, "finish_reason", required=True)
    _check_int(seq, "seq")
    if seq is not None and seq < 0:
        raise ValueError(f"seq must not be negative, got {seq}")
    if timestamp is not None and not isinstance(timestamp, datetime):
        raise ValueError(f"timestamp must be a datetime, got {type(timestamp).__name__}")
    if not isinstance(ill_formed, bool):
        raise ValueError(f"ill_formed must be a bool, got {type(ill_formed).__name__}")
    if prompt_messages is None:
        raise ValueError("prompt_messages is required (an empty list is allowed)")
    texts = {
        "prompt_messages": None,
        "response_message": _json_text(response_message, "response_message"),
        "tools": _json_text(tools, "tools"),
        "metadata": _json_text(metadata, "metadata"),
    }
    if not isinstance(prompt_messages, PromptMessages):
        texts["prompt_messages"] = _json_text(prompt_messages, "prompt_messages")
    for name, text in texts.items():
        _check_text(text, name, required=False)
    if isinstance(prompt_messages, PromptMessages):
        texts["prompt_messages"] = prompt_messages.text()  # its texts were checked when it was made
    size = 4 * (prompt.size + output.size) + (0 if logprobs is None else 4 * logprobs.size)
    size += sum(len(text or "") for text in texts.values())
    row: dict[str, Any] = {
        "session_id": session_id,
        "prompt_ids": prompt,
        "output_ids": output,
        "output_logprobs": logprobs,
        "finish_reason": finish_reason,
        **texts,
        "timestamp": timestamp,
        "ill_formed": ill_formed,
    }
    return TurnRow(row, prompt_messages, response_message, size)


def sessions_row(
    session_id: str,
    reward: float | None,
    index: int | None = None,
    group_index: int | None = None,
    label: str | None = None,
    metadata: JsonLike = None,
    *,
    rollout_id: int | None = None,
) -> dict[str, Any]:
    """The sessions row :meth:`TurnLogWriter.finish_session` buffers, checked (``ValueError`` for a bad one).

    Callers that must refuse a whole session before any of its turns is buffered (the importers) check its
    row with this first.
    """
    _check_text(session_id, "session_id", required=True)
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(reward)
    ):
        raise ValueError(f"reward must be a finite number or None, got {reward!r}")
    _check_int(index, "index")
    _check_int(group_index, "group_index")
    _check_int(rollout_id, "rollout_id")
    _check_text(label, "label", required=False)
    if metadata is not None and not isinstance(metadata, (str, dict)):
        raise ValueError(f"metadata must be a JSON object, got {type(metadata).__name__}")
    meta_text = _json_text(metadata, "metadata")
    _check_text(meta_text, "metadata", required=False)
    value = _json_value(metadata, "sessions metadata")
    if value is not None:
        check_sessions_metadata(value)  # (what the reader checks the row for)
    row: dict[str, Any] = {
        "session_id": session_id,
        "reward": reward,
        "index": index,
        "group_index": group_index,
        "label": label,
        "metadata": meta_text,
        "rollout_id": rollout_id,
    }
    return row
