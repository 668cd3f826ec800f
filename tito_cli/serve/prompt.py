"""A prompt as the gateway builds it for a ``generate`` upstream: its ids, how they were made, and why.

Shared by both histories (:mod:`.history`: ``render``; :mod:`.canonical`): the :class:`Renderer` they
build with, the :class:`Prompt` they return, the reasons a prompt was rendered rather than continued
(docs/spec.md §11), and the ids' and messages' JSON texts kept beside them.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from ..capture.records import PromptMessages

__all__ = [
    "CANONICAL",
    "REASONS",
    "RENDERED",
    "Message",
    "Prompt",
    "Renderer",
    "extend_json",
    "id_array",
    "ids_json",
    "texts_of",
    "tools_key_of",
]

Message = dict[str, Any]

#: history_reason values of a rendered turn (docs/spec.md §11), in the order reports list them.
NO_HELD_TURN = "no held turn"
TOOLS_CHANGED = "tools changed"
HISTORY_REWRITTEN = "history rewritten"
NO_NEW_MESSAGES = "no new messages"
NEW_ASSISTANT_MESSAGE = "new assistant message"
OUTPUT_NOT_ENDED = "output not ended"
NOT_APPEND_ONLY = "template not append-only"
TEMPLATE_OPTIONS = "template options"
REASONS = (
    NO_HELD_TURN,
    TOOLS_CHANGED,
    HISTORY_REWRITTEN,
    NO_NEW_MESSAGES,
    NEW_ASSISTANT_MESSAGE,
    OUTPUT_NOT_ENDED,
    NOT_APPEND_ONLY,
    TEMPLATE_OPTIONS,
)

CANONICAL = "canonical"
RENDERED = "rendered"


class Renderer(Protocol):
    """The tokenizer and chat template a prompt is built with (thread-safe; called off the event loop)."""

    def render(self, messages: list[Message], tools: Any) -> str:
        """The prompt text of ``messages``, ending with the generation prompt."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class Prompt:
    """A prompt's ids and how they were made (``history``: ``canonical`` or ``rendered``)."""

    #: The prompt's ids: an ``array('i')`` (held turns and pieces keep theirs that way, and the writer
    #: reads one without converting each id), or a list when the renderer encoded the text whole.
    ids: Sequence[int]
    history: str
    #: The conversation the ids hold, to record as the turn's ``prompt_messages``: a continued turn's
    #: is the held messages and answer (not the client's echo of them, which may differ in what
    #: identity ignores) followed by the new ones, so that the rebuild routes it onto the held turn.
    messages: list[Message]
    #: Why a rendered prompt did not continue a held turn (``None`` when continued; see :data:`REASONS`).
    reason: str | None = None
    #: Ids held from an earlier turn at the front of ``ids`` (0 when rendered).
    held: int = 0
    #: ``ids`` as compact JSON text, when the history keeps it (canonical): the held part's text is kept
    #: with the held turn, so that sending a continued prompt serializes only its new ids.
    ids_json: str | None = None
    #: The request's tools as canonical JSON, when the history compared them (``remember`` reuses it:
    #: it runs on the event loop, and a coding agent's tools are tens of kilobytes).
    tools_key: str | None = None
    #: ``messages`` with each one's JSON text (``None`` when one cannot be stored: the writer then
    #: refuses the turn, saying why); a continued turn's extends the held turn's, so only its new
    #: messages are serialized.
    texts: PromptMessages | None = None

    def recorded_messages(self) -> list[Message] | PromptMessages:
        """What the turn records as its ``prompt_messages``: the texts when there are, else the messages."""
        return self.texts if self.texts is not None else self.messages

    def metadata(self) -> dict[str, str]:
        """The turn metadata keys docs/spec.md §11 defines."""
        out = {"history": self.history}
        if self.reason is not None:
            out["history_reason"] = self.reason
        return out


def ids_json(ids: Sequence[int]) -> str:
    """Token ids as a compact JSON array (``json.dumps``'s text with ``separators=(",", ":")``).

    msgspec writes it: about 10 us for 2k ids, where ``json.dumps`` takes 200 (a rendered 32k-token
    prompt: 0.2 ms, not 3).
    """
    return msgspec.json.encode(ids if isinstance(ids, list) else list(ids)).decode()


def id_array(ids: Sequence[int]) -> array[int]:
    return ids if isinstance(ids, array) else array("i", ids)


def texts_of(messages: Sequence[Message], before: PromptMessages | None = None) -> PromptMessages | None:
    """``before`` (or nothing) followed by ``messages``, serialized; ``None`` when one cannot be stored."""
    try:
        return before.extend(messages) if before is not None else PromptMessages.of(messages)
    except ValueError:  # the writer refuses the turn, and says why
        return None


def extend_json(text: str, more: Sequence[int]) -> str:
    """The JSON array ``text`` with ``more`` appended (without serializing what it already holds)."""
    if not more:
        return text
    tail = ids_json(more)[1:]
    return text[:-1] + ("," if text != "[]" else "") + tail


def tools_key_of(tools: Any) -> str:
    return json.dumps(tools, sort_keys=True, ensure_ascii=False)
