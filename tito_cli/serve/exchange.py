"""The one internal shape every dialect translates to and from, and the errors that leave in a dialect.

A client's request, whatever its wire, becomes a :class:`ChatRequest`: chat-template messages (the
OpenAI chat shape a Jinja chat template reads: ``role``, ``content``, ``reasoning_content``,
``tool_calls``, ``tool_call_id``) and function tools.  An upstream answers it with a
:class:`Generation`: the ids it received and generated, the raw finish reason, the parsed reply, and
the messages and tools it rendered or sent (what the turn records).  A dialect turns the generation
back into its own response or SSE events.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..capture.records import PromptMessages

__all__ = [
    "ChatRequest",
    "ClientError",
    "Generation",
    "OutputCall",
    "UpstreamError",
    "assistant_message",
    "new_id",
]


class ClientError(Exception):
    """A request the gateway refuses (a 4xx in the client's dialect); nothing is recorded."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class UpstreamError(Exception):
    """The upstream failed (its own 5xx, a timeout, a refused connection, a malformed answer); nothing recorded.

    ``status`` is what the client gets: the upstream's own status when it answered with an error,
    502 when it could not be reached or answered something unusable, 504 on a timeout.  ``detail`` is for
    the gateway's own log line only (the upstream's address, the transport's error): never sent to a client.
    """

    def __init__(self, message: str, status: int = 502, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.detail = detail


def new_id(prefix: str) -> str:
    """A fresh opaque id: ``prefix`` and 24 hex digits."""
    return prefix + secrets.token_hex(12)


@dataclass
class ChatRequest:
    """A client's request in the internal shape.

    ``messages`` and ``tools`` are chat-template messages and ``{"type": "function", "function": …}``
    tools; tool-call ``arguments`` stay as the client gave them (a JSON object from Anthropic, a JSON
    string from OpenAI) until the upstream normalises them its way.  ``notes`` go into the turn's
    metadata (what the dialect dropped, for example).
    """

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    model: str | None = None
    #: The client's body in bytes (how heavy the request is to serialise again).
    size: int = 0
    notes: dict[str, Any] = field(default_factory=dict)
    #: The request's own chat-template options (the Chat Completions dialect's ``chat_template_kwargs``).
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    #: What only the dialect reads back when it answers (``stream_options``, the request's tools).
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class OutputCall:
    """One tool call of a reply: its id (the one the client will echo), name and arguments (parsed JSON)."""

    id: str
    name: str
    arguments: Any

    def arguments_text(self) -> str:
        """The arguments as the JSON text an OpenAI client receives."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False)

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as the JSON object an Anthropic ``tool_use.input`` must be."""
        value = self.arguments
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                return {}
        return value if isinstance(value, dict) else {}


@dataclass
class Generation:
    """One generation call as an upstream answered it, and what the turn records of it."""

    #: A list, an ``array('i')`` (a history's held ids, extended) or an int32 numpy array (a chat answer's,
    #: compacted as it was read): the writer takes either without a copy to numpy of a Python list.
    prompt_ids: Sequence[int] | np.ndarray
    output_ids: list[int]
    logprobs: list[float]
    #: The upstream's own finish reason (SGLang's ``finish_reason.type``; vLLM's ``finish_reason``).
    finish_reason: str
    content: str
    reasoning: str | None
    tool_calls: list[OutputCall]
    ill_formed: bool
    #: The chat-template messages and tools rendered (generate) or sent (chat); the messages may come
    #: serialized already (a history's :class:`~tito_cli.capture.records.PromptMessages`).
    prompt_messages: list[dict[str, Any]] | PromptMessages
    tools: list[dict[str, Any]] | None
    #: The parsed reply as a chat-template message, in the form the client's echo translates back to.
    response_message: dict[str, Any]
    upstream_id: str | None = None
    cached_tokens: int = 0
    #: What the upstream adds to the turn's metadata (how the prompt was built, for example).
    notes: dict[str, Any] = field(default_factory=dict)
    #: Provenance: the sampling parameters sent upstream, the weight versions it reported (spans or a
    #: scalar), its routed-experts rows ``[len(tokens) - 1 - start, layers, topk]`` and their start.
    sampling: dict[str, Any] | None = None
    weight_versions: Any = None
    routed_experts: Any = None
    routed_experts_start: int = 0

    @property
    def stop(self) -> str:
        """Why generation ended, for the dialects: ``length``, ``tool_calls`` or ``stop``."""
        if self.finish_reason == "length":
            return "length"
        return "tool_calls" if self.tool_calls else "stop"


def assistant_message(
    content: str, reasoning: str | None, calls: list[OutputCall], arguments: Callable[[Any], Any]
) -> dict[str, Any]:
    """The chat-template message of a reply, exactly as the dialects translate its echo back.

    ``content`` is always a string, ``reasoning_content`` only when there is reasoning, ``tool_calls``
    only when there are calls (``arguments`` puts each call's arguments in the upstream's form).  The
    router's message identity is canonical JSON, so a reply must record as its echo will arrive.
    """
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [
            {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": arguments(call.arguments)}}
            for call in calls
        ]
    return message
