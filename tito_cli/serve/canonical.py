"""``--history canonical``: a turn that continues a held one extends the held ids with the new text's only.

Per session (docs/spec.md §11) the gateway holds the token history it produced — the last turns'
``prompt_ids + output_ids`` — with the messages it rendered and the assistant message it answered.
A request whose conversation continues a held turn (its messages up to that answer are the held ones,
by the identity of :func:`same_message`) gets the held ids followed by the tokens of only what is new:
the text the template renders for the new messages and the generation prompt, found generically, for
any template, by rendering the conversation three ways:

* as it is (``full``);
* with the first new message's content replaced by a sentinel: the two renders first differ where that
  content starts, so everything new lies after the last end-of-turn marker before that point (the held
  answer's own end, which the model generated as its last token);
* with the held answer's content changed: the text after that end must not change, which proves the
  end found is the answer's and that nothing of the answer leaks into the new text.

The template may render history as it likes (drop reasoning once a user message follows, re-serialize
arguments): only the text after the answer is taken, so such rewrites no longer reach the prompt.
Anything else falls back to a full render, with the reason recorded (:data:`REASONS`).

A turn's work follows its new text, not its context: the held ids are kept as an ``array('i')`` (a
continued prompt's ids are the held array extended, and the writer takes it without converting 30k
Python ints), with their JSON text (what the generate upstream is sent), and the held messages with their
JSON texts (:class:`~tito_cli.capture.records.PromptMessages`: the writer serializes only the new ones).

Held state is bounded: a few turns per session (a retry from the previous turn still continues), at
most ``max_sessions`` sessions and ``max_held_tokens`` ids (least recently used forgotten first), and
sessions idle for ``idle_seconds`` are forgotten; a finished session is forgotten at once.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ..capture.records import PromptMessages
from .identity import continues
from .pools import in_workers
from .prompt import (
    CANONICAL,
    HISTORY_REWRITTEN,
    NEW_ASSISTANT_MESSAGE,
    NO_HELD_TURN,
    NO_NEW_MESSAGES,
    NOT_APPEND_ONLY,
    OUTPUT_NOT_ENDED,
    RENDERED,
    TOOLS_CHANGED,
    Message,
    Prompt,
    Renderer,
    extend_json,
    id_array,
    ids_json,
    texts_of,
    tools_key_of,
)

__all__ = ["CanonicalHistory"]


@dataclass
class _Held:
    """One answered turn: what was rendered, what was answered, and the ids both made."""

    messages: list[Message]
    tools_key: str
    answer: Message
    ids: array[int]
    ended: bool
    #: ``ids`` as compact JSON text.
    ids_json: str
    #: ``messages`` and ``answer`` with their JSON texts (``None`` if one cannot be stored).
    texts: PromptMessages | None


@dataclass
class _Session:
    turns: list[_Held] = field(default_factory=list)
    touched: float = 0.0

    @property
    def tokens(self) -> int:
        return sum(len(turn.ids) for turn in self.turns)


class CanonicalHistory:
    """``--history canonical``: a turn that continues a held one extends its ids with the new text's only."""

    name = "canonical"
    summary = "continue the token history the gateway produced; render only what is new"

    def __init__(
        self,
        renderer: Renderer,
        end_of_turn: Sequence[str],
        *,
        turns_per_session: int = 4,
        max_sessions: int = 4096,
        max_held_tokens: int = 64 << 20,
        idle_seconds: float = 3600.0,
        clock: Any = time.monotonic,
    ) -> None:
        if turns_per_session < 1 or max_sessions < 1 or max_held_tokens < 1 or idle_seconds <= 0:
            raise ValueError("turns_per_session, max_sessions, max_held_tokens and idle_seconds must be positive")
        if not end_of_turn:
            raise ValueError("canonical history needs the texts that end a turn (the family's end_of_turn)")
        self.renderer = renderer
        #: Texts that end an assistant turn (the model's stop tokens, as the template also writes them).
        self.end_of_turn = tuple(end_of_turn)
        self.turns_per_session = turns_per_session
        self.max_sessions = max_sessions
        self.max_held_tokens = max_held_tokens
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, _Session] = OrderedDict()
        self._held_tokens = 0

    # -- the gateway's calls ---------------------------------------------------

    @in_workers
    def prompt(self, session_id: str, messages: Sequence[Message], tools: Any) -> Prompt:
        """The prompt for ``messages``: continued from the most recent held turn it extends, else rendered."""
        with self._lock:
            self._expire()
            session = self._sessions.get(session_id)
            held = list(session.turns) if session is not None else []
        reason = NO_HELD_TURN if not held else HISTORY_REWRITTEN
        tools_key = tools_key_of(tools)
        for turn in reversed(held):
            if not continues(messages, turn.messages, turn.answer):
                continue
            if turn.tools_key != tools_key:
                reason = TOOLS_CHANGED
                continue
            new = list(messages[len(turn.messages) + 1 :])
            continued = self._continue(turn, new, tools)
            if isinstance(continued, Prompt):
                return replace(continued, tools_key=tools_key)
            reason = continued
            break
        text = self.renderer.render(list(messages), tools)
        ids = self.renderer.encode(text)
        return Prompt(
            array("i", ids), RENDERED, list(messages), reason, ids_json=ids_json(ids), tools_key=tools_key,
            texts=texts_of(messages),
        )

    def remember(self, session_id: str, prompt: Prompt, messages: Sequence[Message], tools: Any,
                 output_ids: Sequence[int], answer: Message) -> None:
        """Hold an answered turn (call it before the client can send its next request)."""
        output = [int(i) for i in output_ids]
        try:
            ids = id_array(prompt.ids) + array("i", output)
        except OverflowError:  # not token ids (a broken upstream): nothing to continue from
            return
        # The last few tokens are enough: an end-of-turn marker is one special token or a short text.
        ended = self.renderer.decode(output[-8:]).endswith(self.end_of_turn)
        text = extend_json(prompt.ids_json if prompt.ids_json is not None else ids_json(prompt.ids), output)
        tools_key = prompt.tools_key if prompt.tools_key is not None else tools_key_of(tools)
        held_answer = dict(answer)
        texts = texts_of([held_answer], prompt.texts) if prompt.texts is not None else None
        turn = _Held(list(prompt.messages), tools_key, held_answer, ids, ended, text, texts)
        with self._lock:
            session = self._sessions.pop(session_id, None) or _Session()
            self._held_tokens -= session.tokens
            session.turns.append(turn)
            del session.turns[: -self.turns_per_session]
            session.touched = self._clock()
            self._sessions[session_id] = session
            self._held_tokens += session.tokens
            self._bound()

    def forget(self, session_id: str) -> None:
        """Drop a session's held turns (it finished)."""
        with self._lock:
            session = self._sessions.pop(session_id, None)
            if session is not None:
                self._held_tokens -= session.tokens

    @property
    def held_sessions(self) -> int:
        return len(self._sessions)

    @property
    def held_tokens(self) -> int:
        return self._held_tokens

    # -- continuing --------------------------------------------------------------

    def _continue(self, turn: _Held, new: list[Message], tools: Any) -> Prompt | str:
        """The held ids plus the new text's ids, or the reason they cannot be continued."""
        if not new:
            return NO_NEW_MESSAGES
        if any(m.get("role") == "assistant" for m in new):
            return NEW_ASSISTANT_MESSAGE
        if not turn.ended:
            return OUTPUT_NOT_ENDED
        suffix = self._new_text(turn, new, tools)
        if suffix is None:
            return NOT_APPEND_ONLY
        new_ids = self.renderer.encode(suffix)
        ids = turn.ids + array("i", new_ids)
        messages = [*turn.messages, turn.answer, *new]
        texts = texts_of(new, turn.texts) if turn.texts is not None else None
        return Prompt(
            ids, CANONICAL, messages, None, len(turn.ids), extend_json(turn.ids_json, new_ids), texts=texts
        )

    def _new_text(self, turn: _Held, new: list[Message], tools: Any) -> str | None:
        """What the template renders after the held answer: the new messages and the generation prompt.

        Rendered first with only the conversation's leading system messages before the answer, so that
        a turn's work follows its new text, not its context; with the whole conversation when the
        template refuses that window or the window proves nothing.
        """
        lead = 0
        while lead < len(turn.messages) and turn.messages[lead].get("role") in ("system", "developer"):
            lead += 1
        contexts = [turn.messages[:lead], turn.messages] if lead < len(turn.messages) else [turn.messages]
        for context in contexts:
            try:  # a template may refuse a conversation or a probe: then nothing is proven with it
                suffix = self._text_after(context, turn.answer, new, tools)
            except Exception:
                continue
            if suffix is not None:
                return suffix
        return None

    def _text_after(self, context: list[Message], answer: Message, new: list[Message], tools: Any) -> str | None:
        """The text after ``answer`` in the render of ``context + [answer] + new``, if three renders prove it."""
        render = self.renderer.render
        full = render([*context, answer, *new], tools)
        probed_new = render([*context, answer, _probe(new[0]), *new[1:]], tools)
        if probed_new == full:
            return None  # the first new message's content is not rendered: nothing marks where it starts
        end = self._answer_end(full, _common_prefix(full, probed_new))
        if end is None:
            return None
        suffix = full[end:]
        # The answer's own end, or an earlier one?  Change the answer: the text after its end must not move.
        probed_answer = render([*context, _probe(answer, append=True), *new], tools)
        head = probed_answer[: len(probed_answer) - len(suffix)]
        if not probed_answer.endswith(suffix) or not head.endswith(self.end_of_turn):
            return None
        return suffix

    def _answer_end(self, text: str, before: int) -> int | None:
        """Where the last end-of-turn marker that ends at or before ``before`` ends, if there is one."""
        marks = self.end_of_turn
        ends = [at + len(mark) for mark in marks if (at := text.rfind(mark, 0, before)) >= 0]
        return max(ends, default=None)

    # -- bounds ----------------------------------------------------------------

    def _expire(self) -> None:
        cutoff = self._clock() - self.idle_seconds
        while self._sessions:
            sid, session = next(iter(self._sessions.items()))
            if session.touched > cutoff:
                break
            del self._sessions[sid]
            self._held_tokens -= session.tokens

    def _bound(self) -> None:
        while self._sessions and (len(self._sessions) > self.max_sessions or self._held_tokens > self.max_held_tokens):
            _, session = self._sessions.popitem(last=False)
            self._held_tokens -= session.tokens


# -- render probes -----------------------------------------------------------------


def _probe(message: Message, *, append: bool = False) -> Message:
    """``message`` with its content replaced by (or, ``append``, ended with) a character it cannot start with."""
    content = message.get("content")
    text = content if isinstance(content, str) else ""
    mark = "\x01" if not text.startswith("\x01") and not text.endswith("\x01") else "\x02"
    return {**message, "content": text + mark if append else mark}


def _common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo
