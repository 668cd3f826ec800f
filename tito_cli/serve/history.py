"""``--history canonical``: a session's next prompt continues the token history the gateway produced.

Per session the gateway holds the heads of the conversations it answered (each: the messages it
rendered, the reply it recorded, and that turn's ``prompt_ids + output_ids``).  A request whose
messages continue a head — its messages up to the last assistant message equal the head's messages
and reply, by the identity :func:`message_identity` defines — gets the held ids followed by the tokens
of only the new suffix: the text the chat template renders for the new messages and the generation
prompt.  Anything else falls back to a full render, as ``render`` does, and says why.

The suffix is derived from the template itself, for any template: both renders are neutralised
(every assistant message's reasoning removed, so a template that drops earlier reasoning once a new
user message arrives renders the history the same way in both), the render of the messages before
the held reply must be a prefix of the full render (else the template is not append-only here and
the turn falls back), and the held reply's rendering ends at the model family's first end-of-turn
marker after that prefix.  What follows it is the suffix.  When the model's own output already ended
with that marker, the suffix starts after it; a cut output gets the marker from the suffix.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from ..families import FamilyProfile
from .template import ChatTemplate

__all__ = ["CANONICAL", "RENDER", "History", "Plan", "message_identity"]

RENDER, CANONICAL = "render", "canonical"

#: The turn metadata value of a turn whose prompt continued held ids, and of one rendered whole.
CONTINUED, RENDERED = "canonical", "rendered"


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def message_identity(message: dict[str, Any]) -> str:
    """A message as the continuation check compares it.

    Ignored, because clients legitimately change them on echo or templates do not render them:
    surrounding whitespace of the content, the assistant's reasoning (clients drop or keep it; the
    held ids hold what the model wrote), tool-call and tool-result ids, and the formatting of tool-call
    arguments (compared as parsed JSON).  Thinking signatures and ``cache_control`` never reach the
    messages at all.
    """
    content = message.get("content")
    key: dict[str, Any] = {
        "role": message.get("role"),
        "content": content.strip() if isinstance(content, str) else content,
    }
    calls = message.get("tool_calls")
    if calls:
        key["tool_calls"] = [
            [call.get("function", {}).get("name"), _arguments(call.get("function", {}).get("arguments"))]
            for call in calls
        ]
    return json.dumps(key, sort_keys=True, ensure_ascii=False)


@dataclass
class _Head:
    """The last turn of one conversation of a session: what its next request must continue."""

    keys: list[str]  # identities of the rendered messages and then of the reply
    tools: str
    ids: list[int]  # prompt_ids + output_ids


@dataclass
class Plan:
    """How a request's prompt was built: the ids, which head it continued, and the turn's notes."""

    prompt_ids: list[int]
    notes: dict[str, Any]
    continued: _Head | None = None
    keys: list[str] = field(default_factory=list)
    tools: str = ""


def _neutral(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in m.items() if k != "reasoning_content"} if m.get("role") == "assistant" else m
        for m in messages
    ]


class History:
    """The held heads of every session (bounded), and the rule that continues them.

    ``prompt`` runs in a worker thread; ``hold`` is called before the reply leaves the gateway, so a
    client's next request always finds the head of the turn it answers.
    """

    def __init__(
        self,
        template: ChatTemplate,
        profile: FamilyProfile,
        *,
        heads_per_session: int = 4,
        max_sessions: int = 4096,
        max_held_tokens: int = 64 << 20,
    ) -> None:
        if not profile.end_of_turn:
            raise ValueError(f"--history canonical needs the end-of-turn marker of the {profile.name} family")
        self.template = template
        self.end_of_turn = profile.end_of_turn[0]
        self.heads_per_session = heads_per_session
        self.max_sessions = max_sessions
        self.max_held_tokens = max_held_tokens
        self._heads: OrderedDict[str, list[_Head]] = OrderedDict()
        self._held_tokens = 0
        self._lock = threading.Lock()

    # -- building a prompt (worker thread) ------------------------------------------------------

    def prompt(self, session_id: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Plan:
        keys = [message_identity(m) for m in messages]
        tools_key = json.dumps(tools, sort_keys=True, ensure_ascii=False)
        with self._lock:
            heads = list(self._heads.get(session_id, ()))
        head, reason = self._match(heads, keys, tools_key)
        if head is not None:
            try:
                suffix = self._suffix(messages, tools, len(head.keys) - 1, head.ids)
            except _NotAppendOnly as exc:
                reason = str(exc)
            else:
                notes = {"history": CONTINUED}
                return Plan(head.ids + suffix, notes, head, keys, tools_key)
        ids = self.template.prompt_ids(messages, tools)
        return Plan(ids, {"history": RENDERED, "history_reason": reason}, None, keys, tools_key)

    @staticmethod
    def _match(heads: list[_Head], keys: list[str], tools: str) -> tuple[_Head | None, str]:
        if not heads:
            return None, "first turn of the session"
        best = None
        for head in heads:
            n = len(head.keys)
            if len(keys) > n and keys[:n] == head.keys and (best is None or n > len(best.keys)):
                best = head
        if best is not None:
            if best.tools != tools:
                return None, "the tools changed"
            return best, ""
        if any(keys == head.keys for head in heads):
            return None, "no new message after the held reply"
        return None, "the conversation does not continue a held turn (a sub-agent, a compaction, a rewrite or a retry)"

    def _suffix(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reply: int, held: list[int]
    ) -> list[int]:
        """The ids of what the template renders after the held reply (``messages[reply]``)."""
        neutral = _neutral(messages)
        before = self.template.render_text(neutral[:reply], tools, generation_prompt=False)
        full = self.template.render_text(neutral, tools, generation_prompt=True)
        if not full.startswith(before):
            raise _NotAppendOnly("the template renders the earlier messages differently once new ones follow")
        end = full.find(self.end_of_turn, len(before))
        if end < 0:
            raise _NotAppendOnly(f"the held reply's rendering has no {self.end_of_turn!r}")
        marker_end = end + len(self.end_of_turn)
        tail = self.template.decode(held[-8:])
        start = marker_end if tail.endswith(self.end_of_turn) else end
        return self.template.encode(full[start:])

    # -- holding (on the loop, before the reply is sent) ----------------------------------------

    def hold(self, session_id: str, plan: Plan, response: dict[str, Any], output_ids: list[int]) -> None:
        head = _Head([*plan.keys, message_identity(response)], plan.tools, [*plan.prompt_ids, *output_ids])
        with self._lock:
            heads = self._heads.pop(session_id, [])
            if plan.continued is not None and plan.continued in heads:
                heads.remove(plan.continued)
                self._held_tokens -= len(plan.continued.ids)
            heads.append(head)
            self._held_tokens += len(head.ids)
            while len(heads) > self.heads_per_session:
                self._held_tokens -= len(heads.pop(0).ids)
            self._heads[session_id] = heads
            while self._heads and (len(self._heads) > self.max_sessions or self._held_tokens > self.max_held_tokens):
                _, dropped = self._heads.popitem(last=False)
                self._held_tokens -= sum(len(h.ids) for h in dropped)

    def forget(self, session_id: str) -> None:
        with self._lock:
            dropped = self._heads.pop(session_id, [])
            self._held_tokens -= sum(len(h.ids) for h in dropped)


class _NotAppendOnly(Exception):
    """The template's render does not extend the held history here (the turn falls back)."""
