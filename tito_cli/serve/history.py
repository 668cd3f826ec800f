"""How the gateway builds a prompt's token ids: rendered whole (``render``) or continued (``canonical``).

``render`` (the default, the reference adapters' behaviour): every request's conversation goes through
the chat template from scratch, and its text gets the ids whole-text tokenization gives (the gateway
encodes only the pieces its session's previous prompt did not have: ``incremental.py``).  Whenever the
template re-renders history differently from what the model generated (earlier reasoning dropped, tool
arguments re-serialized, whitespace stripped), the new prompt stops extending the tokens of the last
turn, and the rebuild forks there.

``canonical`` (docs/spec.md §11): per session the gateway holds the token history it produced — the
last turns' ``prompt_ids + output_ids`` — with the messages it rendered and the assistant message it
answered.  A request whose conversation continues a held turn (its messages up to that answer are the
held ones, by the identity of :func:`same_message`) gets the held ids followed by the tokens of only
what is new: the text the template renders for the new messages and the generation prompt.  That text
is found generically, for any template, by rendering the conversation three ways:

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
Python ints), with their JSON text (what the generate upstream is sent), and the held messages with
their JSON texts (:class:`~tito_cli.capture.records.PromptMessages`: the writer serializes only the
new messages).

Held state is bounded: a few turns per session (a retry from the previous turn still continues), at
most ``max_sessions`` sessions and ``max_held_tokens`` ids (least recently used forgotten first), and
sessions idle for ``idle_seconds`` are forgotten; a finished session is forgotten at once.
"""

from __future__ import annotations

import json
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from ..capture.records import PromptMessages
from .incremental import PieceEncoder

__all__ = [
    "HISTORIES",
    "REASONS",
    "CanonicalHistory",
    "Prompt",
    "RenderedHistory",
    "Renderer",
    "same_message",
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


class RenderedHistory:
    """``--history render``: every prompt rendered whole; tokenized whole, or by pieces (``pieces``)."""

    name = "render"
    summary = "render every request's conversation whole (the reference adapters' behaviour)"

    def __init__(self, renderer: Renderer, pieces: PieceEncoder | None = None) -> None:
        self.renderer = renderer
        #: Tokenizes a session's prompt reusing its previous prompt's pieces (the same ids as whole).
        self.pieces = pieces

    def prompt(self, session_id: str, messages: Sequence[Message], tools: Any) -> Prompt:
        text = self.renderer.render(list(messages), tools)
        if self.pieces is None:
            return Prompt(self.renderer.encode(text), RENDERED, list(messages), texts=_texts(messages))
        ids, ids_json = self.pieces.encode(session_id, text)
        return Prompt(ids, RENDERED, list(messages), ids_json=ids_json, texts=_texts(messages))

    def remember(self, session_id: str, prompt: Prompt, messages: Sequence[Message], tools: Any,
                 output_ids: Sequence[int], answer: Message) -> None:
        """Nothing is held under ``render`` (the pieces are held when the prompt is made)."""

    def forget(self, session_id: str) -> None:
        """Drop the session's held pieces."""
        if self.pieces is not None:
            self.pieces.forget(session_id)


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

    def prompt(self, session_id: str, messages: Sequence[Message], tools: Any) -> Prompt:
        """The prompt for ``messages``: continued from the most recent held turn it extends, else rendered."""
        with self._lock:
            self._expire()
            session = self._sessions.get(session_id)
            held = list(session.turns) if session is not None else []
        reason = NO_HELD_TURN if not held else HISTORY_REWRITTEN
        tools_key = _tools_key(tools)
        for turn in reversed(held):
            if not _continues(messages, turn):
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
            array("i", ids), RENDERED, list(messages), reason, ids_json=_ids_json(ids), tools_key=tools_key,
            texts=_texts(messages),
        )

    def remember(self, session_id: str, prompt: Prompt, messages: Sequence[Message], tools: Any,
                 output_ids: Sequence[int], answer: Message) -> None:
        """Hold an answered turn (call it before the client can send its next request)."""
        output = [int(i) for i in output_ids]
        try:
            ids = _id_array(prompt.ids) + array("i", output)
        except OverflowError:  # not token ids (a broken upstream): nothing to continue from
            return
        # The last few tokens are enough: an end-of-turn marker is one special token or a short text.
        ended = self.renderer.decode(output[-8:]).endswith(self.end_of_turn)
        text = _extend_json(prompt.ids_json if prompt.ids_json is not None else _ids_json(prompt.ids), output)
        tools_key = prompt.tools_key if prompt.tools_key is not None else _tools_key(tools)
        held_answer = dict(answer)
        texts = _texts([held_answer], prompt.texts) if prompt.texts is not None else None
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
        texts = _texts(new, turn.texts) if turn.texts is not None else None
        return Prompt(
            ids, CANONICAL, messages, None, len(turn.ids), _extend_json(turn.ids_json, new_ids), texts=texts
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


# -- message identity ------------------------------------------------------------


def same_message(replayed: Message, held: Message) -> bool:
    """Whether a client's replayed message is the held one (docs/spec.md §11.2).

    Ignored, because clients legitimately change them on echo: keys other than the role, content,
    reasoning and tool calls (thinking signatures, ``cache_control``, tool-call and tool-result ids),
    whitespace around content and reasoning (templates strip it), how tool-call arguments are
    serialized (compared as JSON values), and reasoning the client left out (Chat Completions clients
    do not send it back).
    """
    if replayed.get("role") != held.get("role"):
        return False
    if _text(replayed.get("content")) != _text(held.get("content")):
        return False
    reasoning = _text(replayed.get("reasoning_content"))
    if reasoning and reasoning != _text(held.get("reasoning_content")):
        return False
    return _calls(replayed.get("tool_calls")) == _calls(held.get("tool_calls"))


def _continues(messages: Sequence[Message], turn: _Held) -> bool:
    n = len(turn.messages)
    if len(messages) <= n:
        return False
    # An echo equal to the held message (a dict comparison, in C) is the same message; only the others
    # (an assistant message echoed in the client's shape) go through the identity's rules.
    echoed = messages[:n]
    if echoed != turn.messages and not all(
        m == h or same_message(m, h) for m, h in zip(echoed, turn.messages, strict=True)
    ):
        return False
    return messages[n] == turn.answer or same_message(messages[n], turn.answer)


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):  # content parts: their texts, in order
        return "".join(str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in content).strip()
    return json.dumps(content, sort_keys=True)


def _calls(calls: Any) -> list[tuple[str, Any]]:
    out = []
    for call in calls or []:
        function = call.get("function", call) if isinstance(call, dict) else {}
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = arguments.strip()
        out.append((str(function.get("name")), arguments))
    return out


def _ids_json(ids: Sequence[int]) -> str:
    return json.dumps(ids if isinstance(ids, list) else list(ids), separators=(",", ":"))


def _id_array(ids: Sequence[int]) -> array[int]:
    return ids if isinstance(ids, array) else array("i", ids)


def _texts(messages: Sequence[Message], before: PromptMessages | None = None) -> PromptMessages | None:
    """``before`` (or nothing) followed by ``messages``, serialized; ``None`` when one cannot be stored."""
    try:
        return before.extend(messages) if before is not None else PromptMessages.of(messages)
    except ValueError:  # the writer refuses the turn, and says why
        return None


def _extend_json(text: str, more: Sequence[int]) -> str:
    """The JSON array ``text`` with ``more`` appended (without serializing what it already holds)."""
    if not more:
        return text
    tail = _ids_json(more)[1:]
    return text[:-1] + ("," if text != "[]" else "") + tail


def _tools_key(tools: Any) -> str:
    return json.dumps(tools, sort_keys=True, ensure_ascii=False)


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


#: ``--history`` name -> how prompts are built.
HISTORIES: dict[str, type[RenderedHistory] | type[CanonicalHistory]] = {
    RenderedHistory.name: RenderedHistory,
    CanonicalHistory.name: CanonicalHistory,
}
