"""Format 2's delta encoding (docs/spec.md §9): each turn stored against an earlier turn of its session.

A turn's prompt is almost always the previous turn's prompt and output plus a
few new messages.  :class:`DeltaEncoder` remembers the last few turns of each
open session and, for a new turn, picks the one it shares the most with as its
*base*: the row then stores how many leading prompt ids and messages it shares
with that base, and only the rest.  Sub-agents and compaction restarts
interleave with their parent's turns, so the base is chosen among several
recent turns, not only the last one; a turn whose whole prompt a later turn
repeats gives way to that turn, so the turns held are the latest of each
conversation in flight.

Memory is bounded: at most ``candidates`` turns per session (each its
prompt + output ids and its messages' JSON texts, the texts shared with the
turn it was stored against), at most ``max_sessions`` sessions, and at most
``max_bytes`` in all; past either cap the least recently recorded session is
forgotten, and its next turn is stored whole (correct, only larger).
"""

from __future__ import annotations

import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._arrow import common_prefix
from .records import PromptMessages

__all__ = ["Delta", "DeltaEncoder", "JsonValue", "message_texts"]

#: A JSON column's value as a harness gives it: JSON text, or the parsed value (or, for the prompt,
#: its messages already serialized).
JsonValue = str | dict[str, Any] | list[Any] | PromptMessages | None


@dataclass(frozen=True, slots=True)
class Delta:
    """How one turn is stored: against ``base_seq`` (``None``: whole), with what is new."""

    base_seq: int | None
    shared_prompt_ids: int | None
    shared_messages: int | None
    #: The prompt ids after the shared ones (all of them when stored whole).
    new_ids: np.ndarray
    #: JSON texts of the prompt messages after the shared ones; ``None`` when the turn
    #: is stored whole (its ``prompt_messages`` cell is then the text as given).
    new_messages: list[str] | None

    def messages_cell(self) -> str | None:
        """The ``prompt_messages`` cell of a row stored against a base (a JSON array of the new messages)."""
        return None if self.new_messages is None else "[" + ", ".join(self.new_messages) + "]"


@dataclass(slots=True)
class _Held:
    """A recorded turn kept as a candidate base."""

    seq: int
    #: prompt_ids + output_ids, and where the prompt ends.
    ids: np.ndarray
    prompt_length: int
    #: JSON text of each prompt message, then of the response message if it is a JSON object;
    #: ``None`` when the prompt was not a JSON array of objects (nothing can share it).
    messages: list[str] | None
    prompt_messages: int
    nbytes: int

    def superseded_by(self, shared_ids: int, shared_messages: int) -> bool:
        """Whether a turn sharing this much with this one starts with all of its prompt.

        Such a turn shares with any later turn at least what this one would
        (up to this one's prompt, both are the same; beyond it, only a later
        turn that goes back to this output's re-tokenized tail would prefer
        this one): holding it any longer only pushes out turns of other
        conversations interleaved with it (a sub-agent's, a compacted restart's).
        """
        return shared_ids >= self.prompt_length and shared_messages >= self.prompt_messages


def message_texts(value: JsonValue) -> list[str] | None:
    """Each prompt message's JSON text, from the prompt as a JSON text or a list; ``None`` if it is neither.

    The texts are what a reader's parse of the stored array gives back:
    ``json.loads`` of each is the message.  Messages are compared by these
    texts, so a shared message is stored exactly (key order, ``1`` vs ``1.0``).
    :class:`~tito_cli.capture.records.PromptMessages` carry these texts already.
    """
    if isinstance(value, PromptMessages):
        return value.texts
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
    if not isinstance(value, list) or not all(isinstance(m, dict) for m in value):
        return None
    return [json.dumps(m, ensure_ascii=False) for m in value]


def _response_text(value: JsonValue) -> str | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return None
    return json.dumps(value, ensure_ascii=False) if isinstance(value, dict) else None


def _shared_count(a: list[str], b: list[str]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:  # the usual case, compared in C (the same strings, by identity first)
        return n
    n = 0
    for x, y in zip(a, b, strict=False):
        if x is not y and x != y:
            break
        n += 1
    return n


class DeltaEncoder:
    """Chooses each turn's base among the last ``candidates`` turns of its session (see the module doc)."""

    def __init__(self, *, candidates: int = 4, max_sessions: int = 1024, max_bytes: int = 1 << 30) -> None:
        if candidates < 1 or max_sessions < 1 or max_bytes < 1:
            raise ValueError("candidates, max_sessions and max_bytes must be positive")
        self.candidates = candidates
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        #: Session id -> its held turns, newest first; least recently recorded session first.
        self._sessions: OrderedDict[str, list[_Held]] = OrderedDict()
        self._bytes = 0

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)

    @property
    def held_bytes(self) -> int:
        return self._bytes

    def encode(
        self,
        session_id: str,
        seq: int,
        prompt_ids: np.ndarray,
        output_ids: np.ndarray,
        prompt_messages: JsonValue,
        response_message: JsonValue,
    ) -> Delta:
        """How to store this turn, and remember it as a candidate base for the session's next turns."""
        texts = message_texts(prompt_messages)
        held = self._sessions.pop(session_id, [])
        best: tuple[int, _Held, int, int] | None = None  # (bytes saved, turn, shared ids, shared messages)
        for candidate in held:
            shared_ids = common_prefix(candidate.ids, prompt_ids)
            shared_messages = 0
            if texts is not None and candidate.messages is not None:
                shared_messages = _shared_count(candidate.messages, texts)
            saved = 4 * shared_ids + sum(map(len, texts[:shared_messages])) if texts else 4 * shared_ids
            if saved > 0 and (best is None or saved > best[0]):
                best = (saved, candidate, shared_ids, shared_messages)
        if best is None or texts is None:
            delta = Delta(None, None, None, prompt_ids, None)
            kept_texts = texts
        else:
            _, base, shared_ids, shared_messages = best
            delta = Delta(base.seq, shared_ids, shared_messages, prompt_ids[shared_ids:], texts[shared_messages:])
            # The shared texts are the base's own strings: a session holds its conversation about once.
            kept_texts = base.messages[:shared_messages] + texts[shared_messages:]  # type: ignore[index]
            if base.superseded_by(shared_ids, shared_messages):
                held.remove(base)
                self._bytes -= base.nbytes
        self._remember(session_id, held, seq, prompt_ids, output_ids, kept_texts, response_message)
        return delta

    def forget_all(self) -> None:
        """Drop every session's turns."""
        self._sessions.clear()
        self._bytes = 0

    def forget(self, session_id: str) -> None:
        """Drop a finished session's turns (its later turns, if any, start whole)."""
        for turn in self._sessions.pop(session_id, []):
            self._bytes -= turn.nbytes

    def _remember(
        self,
        session_id: str,
        held: list[_Held],
        seq: int,
        prompt_ids: np.ndarray,
        output_ids: np.ndarray,
        texts: list[str] | None,
        response_message: JsonValue,
    ) -> None:
        response = None
        if texts is not None:
            response = _response_text(response_message)
            texts = texts if response is None else [*texts, response]
        ids = np.concatenate((prompt_ids, output_ids)).astype(np.int32, copy=False)
        # Counted as if no text were shared: an upper bound, and cheap.
        nbytes = ids.nbytes + sum(map(len, texts or ()))
        prompt_messages = 0 if texts is None else len(texts) - (response is not None)
        held.insert(0, _Held(seq, ids, len(prompt_ids), texts, prompt_messages, nbytes))
        self._bytes += nbytes
        for dropped in held[self.candidates :]:
            self._bytes -= dropped.nbytes
        del held[self.candidates :]
        self._sessions[session_id] = held  # now the most recently recorded
        while self._sessions and (len(self._sessions) > self.max_sessions or self._bytes > self.max_bytes):
            _, evicted = self._sessions.popitem(last=False)
            self._bytes -= sum(turn.nbytes for turn in evicted)
