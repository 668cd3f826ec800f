"""How the gateway builds a prompt's token ids: rendered whole (``render``) or continued (``canonical``).

``render`` (the default, the reference adapters' behaviour): every request's conversation goes through
the chat template from scratch, and its text gets the ids whole-text tokenization gives (the gateway
encodes only the pieces its session's previous prompt did not have: ``incremental.py``).  Whenever the
template re-renders history differently from what the model generated (earlier reasoning dropped, tool
arguments re-serialized, whitespace stripped), the new prompt stops extending the tokens of the last
turn, and the rebuild forks there.

``canonical`` (:mod:`.canonical`, docs/spec.md §11): per session the gateway holds the token history it
produced, and a request that continues a held turn gets the held ids followed by the tokens of only
what is new.  This module holds the ``--history`` table; :mod:`.prompt` what both share.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .canonical import CanonicalHistory
from .identity import same_message
from .incremental import PieceEncoder
from .pools import in_workers
from .prompt import (
    CANONICAL,
    HISTORY_REWRITTEN,
    NEW_ASSISTANT_MESSAGE,
    NO_HELD_TURN,
    NO_NEW_MESSAGES,
    NOT_APPEND_ONLY,
    OUTPUT_NOT_ENDED,
    REASONS,
    RENDERED,
    TEMPLATE_OPTIONS,
    TOOLS_CHANGED,
    Message,
    Prompt,
    Renderer,
    texts_of,
)

__all__ = [
    "CANONICAL",
    "HISTORIES",
    "HISTORY_REWRITTEN",
    "NEW_ASSISTANT_MESSAGE",
    "NOT_APPEND_ONLY",
    "NO_HELD_TURN",
    "NO_NEW_MESSAGES",
    "OUTPUT_NOT_ENDED",
    "REASONS",
    "RENDERED",
    "TEMPLATE_OPTIONS",
    "TOOLS_CHANGED",
    "CanonicalHistory",
    "Prompt",
    "RenderedHistory",
    "Renderer",
    "same_message",
]


class RenderedHistory:
    """``--history render``: every prompt rendered whole; tokenized whole, or by pieces (``pieces``)."""

    name = "render"
    summary = "render every request's conversation whole (the reference adapters' behaviour)"

    def __init__(self, renderer: Renderer, pieces: PieceEncoder | None = None) -> None:
        self.renderer = renderer
        #: Tokenizes a session's prompt reusing its previous prompt's pieces (the same ids as whole).
        self.pieces = pieces

    @in_workers
    def prompt(self, session_id: str, messages: Sequence[Message], tools: Any) -> Prompt:
        text = self.renderer.render(list(messages), tools)
        if self.pieces is None:
            return Prompt(self.renderer.encode(text), RENDERED, list(messages), texts=texts_of(messages))
        ids, ids_json = self.pieces.encode(session_id, text)
        return Prompt(ids, RENDERED, list(messages), ids_json=ids_json, texts=texts_of(messages))

    def remember(self, session_id: str, prompt: Prompt, messages: Sequence[Message], tools: Any,
                 output_ids: Sequence[int], answer: Message) -> None:
        """Nothing is held under ``render`` (the pieces are held when the prompt is made)."""

    def forget(self, session_id: str) -> None:
        """Drop the session's held pieces."""
        if self.pieces is not None:
            self.pieces.forget(session_id)


#: ``--history`` name -> how prompts are built.
HISTORIES: dict[str, type[RenderedHistory] | type[CanonicalHistory]] = {
    RenderedHistory.name: RenderedHistory,
    CanonicalHistory.name: CanonicalHistory,
}
