"""One generation call, as the rebuild algorithm sees it.

The reader (``read.index_pass``, ``read.rows``, then ``validate``) turns Parquet rows into :class:`Turn` objects after
validating them; the router and linearizer only ever see valid turns.  Token
ids stay numpy arrays end to end: a long session holds millions of prompt ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Message", "MessageKey", "Reject", "RowRef", "SessionInfo", "Turn", "canonical_json", "message_key"]

Message = dict[str, Any]
IdArray = npt.NDArray[np.int32]
LogprobArray = npt.NDArray[np.float32]


# SPEC §3 defines identity as equality of json.dumps(m, sort_keys=True,
# ensure_ascii=False).  Escaping non-ASCII characters is a one-to-one mapping of
# strings, so ASCII output gives exactly the same equality, and the C encoder
# writes it about a quarter faster.  One encoder object, built once: json.dumps
# with options builds a new one per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=True)


def canonical_json(value: Any) -> str:
    """Message identity (SPEC §3): key order is irrelevant, list order and ``1`` vs ``1.0`` are not.

    The text is a key to compare, not to show: equal exactly when the SPEC's
    ``json.dumps(value, sort_keys=True, ensure_ascii=False)`` texts are equal.
    """
    return _CANONICAL.encode(value)


# Tags of the containers in a message key.  A key is a str (a JSON string) or a
# tuple starting with one of these ints, so keys of different kinds never compare equal.
_OBJECT, _ARRAY, _OTHER = 0, 1, 2

MessageKey = Hashable


class _ParsedPairs(tuple):  # type: ignore[type-arg]
    """An object read back from canonical JSON text: its (key, value) pairs in text order."""


def message_key(value: Any) -> MessageKey:
    """A key equal to another exactly when their :func:`canonical_json` texts are equal.

    The router looks messages up by identity (SPEC §3).  Encoding a long tool
    result to canonical JSON escapes every character of it; this key instead
    mirrors the canonical text's tree with the strings themselves (hashed
    once, compared with memcmp): a string is itself (JSON's string encoding is
    one-to-one), an object is its pairs in the text's order (sorted keys), an
    array its items.  Numbers, booleans and null keep their canonical text,
    which is what identity compares (``1`` vs ``1.0``, ``-0.0``, NaN).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        pairs = []
        for k, v in value.items():
            if not isinstance(k, str):
                # Keys such as 2 and 10 are sorted as numbers, then written as "2" and "10",
                # and 1 and "1" write the same text: only the text says what identity sees.
                return message_key(json.loads(canonical_json(value), object_pairs_hook=_ParsedPairs))
            # Most values are strings: no call for them (this runs for every new message).
            pairs.append((k, v if type(v) is str else message_key(v)))
        pairs.sort()  # keys are unique: the sort never compares values
        return (_OBJECT, *pairs)
    if isinstance(value, _ParsedPairs):
        return (_OBJECT, *[(k, message_key(v)) for k, v in value])
    if isinstance(value, (list, tuple)):
        return (_ARRAY, *[v if type(v) is str else message_key(v) for v in value])
    return (_OTHER, canonical_json(value))


@dataclass(frozen=True, slots=True)
class RowRef:
    """Where a record came from, for error messages and reject reports."""

    file: str
    row: int

    def __str__(self) -> str:
        return f"{self.file}, row {self.row}"


@dataclass(frozen=True, slots=True)
class Reject:
    """A session left out of an output (a rebuild's, an import's, an export's), and why."""

    session_id: str
    reason: str
    file: str | None
    row: int | None

    def to_dict(self) -> dict[str, object]:
        return {"session_id": self.session_id, "file": self.file, "row": self.row, "reason": self.reason}


@dataclass(eq=False, slots=True, init=False)
class Turn:
    """One validated turn-log row.

    A format-2 row stored against an earlier turn (docs/spec.md §9) keeps only
    its own new prompt ids and a reference to that turn: its whole prompt is
    built from the base when something first asks for :attr:`prompt_ids`
    (a fork, a sample ending at it, a drift report), not while reading.  The
    linearizer's fast path never needs it (:meth:`prompt_slices`).
    """

    seq: int
    output_ids: IdArray
    #: ``None`` when no logprobs were recorded (null or empty in the log).
    output_logprobs: LogprobArray | None
    finish_reason: str
    prompt_messages: list[Message]
    response_message: Message | None
    tools: Any
    metadata: Any
    source: RowRef | None
    #: True when the harness could not parse the output into a message (SPEC §8.6).
    ill_formed: bool
    #: Identity key of each prompt message under ``keyed_by`` (a policy's
    #: ``message_key``), filled by whoever parsed the messages (the reader caches it
    #: across turns); computed lazily otherwise.
    message_keys: list[MessageKey] | None = field(repr=False)
    keyed_by: Callable[[Any], MessageKey] | None = field(repr=False)
    #: Set by the reader when this prompt's message list starts with all of an
    #: earlier turn's prompt messages (the same objects): ``(that turn, how many)``.
    #: The router then starts below where that turn's prompt ended.
    extends: tuple[Turn, int] | None = field(repr=False)
    #: For a format-2 row stored against an earlier turn (docs/spec.md §9): ``(that turn, n)``
    #: when the prompt's first ``n`` ids are the first ``n`` of that turn's prompt + output ids.
    #: The linearizer then compares only the ids after them when that turn is the one held.
    base: tuple[Turn, int] | None = field(repr=False)
    #: How many prompt ids there are (known without building a delta turn's prompt).
    prompt_length: int
    #: The prompt ids after the ``base``'s shared ones: all of them when there is no base.
    new_prompt_ids: IdArray = field(repr=False)
    _prompt: IdArray | None = field(repr=False)
    #: ``(key function, the response message's key under it)``, once asked for.
    _response_key: tuple[Callable[[Any], MessageKey], MessageKey] | None = field(repr=False)

    def __init__(
        self,
        seq: int,
        prompt_ids: IdArray,
        output_ids: IdArray,
        output_logprobs: LogprobArray | None,
        finish_reason: str,
        prompt_messages: list[Message],
        response_message: Message | None,
        tools: Any = None,
        metadata: Any = None,
        source: RowRef | None = None,
        ill_formed: bool = False,
        message_keys: list[MessageKey] | None = None,
        keyed_by: Callable[[Any], MessageKey] | None = None,
        *,
        base: tuple[Turn, int] | None = None,
    ) -> None:
        """``prompt_ids`` is the whole prompt; with ``base=(turn, n)``, only the ids after those ``n``."""
        self.seq = seq
        self.output_ids = output_ids
        self.output_logprobs = output_logprobs
        self.finish_reason = finish_reason
        self.prompt_messages = prompt_messages
        self.response_message = response_message
        self.tools = tools
        self.metadata = metadata
        self.source = source
        self.ill_formed = ill_formed
        self.message_keys = message_keys
        self.keyed_by = keyed_by
        self.extends = None
        if base is not None and base[1] == 0:
            base = None  # nothing shared: the prompt is stored whole
        self.base = base
        self.new_prompt_ids = prompt_ids
        self.prompt_length = len(prompt_ids) + (0 if base is None else base[1])
        self._prompt = prompt_ids if base is None else None
        self._response_key = None

    @property
    def prompt_ids(self) -> IdArray:
        """The whole prompt's ids (a delta turn's are built from its bases once, on first use)."""
        if self._prompt is None:
            slices = self.prompt_slices(0, self.prompt_length)
            self._prompt = slices[0] if len(slices) == 1 else np.concatenate(slices)
        return self._prompt

    @prompt_ids.setter
    def prompt_ids(self, ids: IdArray) -> None:
        self._prompt = ids
        self.prompt_length = len(ids)
        self.new_prompt_ids = ids if self.base is None else ids[self.base[1] :]

    def prompt_slices(self, start: int, stop: int) -> list[IdArray]:
        """``prompt_ids[start:stop]`` as views of the arrays it is made of, in order (none built).

        Follows the chain of bases (iteratively: a chain can be as long as its
        session) down to turns whose prompt is at hand.
        """
        start, stop = max(start, 0), min(stop, self.prompt_length)
        pieces: list[IdArray] = []  # last piece first
        turn = self
        while stop > start:
            if turn._prompt is not None:
                pieces.append(turn._prompt[start:stop])
                break
            assert turn.base is not None  # a turn without a base has its prompt at hand
            base, shared = turn.base
            if stop > shared:
                pieces.append(turn.new_prompt_ids[max(start - shared, 0) : stop - shared])
                stop = shared
            # What is left lies in the base's prompt + output ids.
            if stop > base.prompt_length:
                pieces.append(base.output_ids[max(start - base.prompt_length, 0) : stop - base.prompt_length])
                stop = base.prompt_length
            turn = base
        pieces.reverse()
        return pieces or [self.new_prompt_ids[:0]]

    def keys(self, key: Callable[[Any], MessageKey] = message_key) -> list[MessageKey]:
        """Each prompt message's identity under ``key`` (computed once per key function)."""
        if self.message_keys is None or self.keyed_by is not key:
            self.message_keys = [key(m) for m in self.prompt_messages]
            self.keyed_by = key
        return self.message_keys

    def response_key(self, key: Callable[[Any], MessageKey] = message_key) -> MessageKey:
        """The response message's identity under ``key`` (``None`` without one), computed once.

        Asked for twice per turn: by the router for the turn's generated leaf, and
        by the reader when the next turn's prompt is stored as sharing it.
        """
        if self.response_message is None:
            return None
        if self._response_key is None or self._response_key[0] is not key:
            self._response_key = (key, key(self.response_message))
        return self._response_key[1]


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A sessions-table row (SPEC §2); defaults stand for a session without one."""

    reward: float = 0.0
    index: int | None = None
    group_index: int | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    #: slime's ``rollout_id`` (SPEC §8.8); samples fall back to ``index`` when it is null.
    rollout_id: int | None = None
    source: RowRef | None = None
    #: False when the session had no sessions row (reward 0.0, null index fields).
    finished: bool = True
