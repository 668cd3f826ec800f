"""The dialect interface: the client's request into a :class:`ChatRequest`, a Generation back out.

A dialect owns its whole wire: it parses its request body (``ClientError`` naming the offending field
for anything it cannot translate), answers a :class:`Generation` as its JSON response or its SSE
events, words errors in its own error shape and lists the model in its own listing.  A request whose
route names no dialect (``GET /v1/models``, an unknown path) speaks the dialect whose ``marker``
header it carries, else the default one (:func:`~tito_cli.serve.dialects.dialect_for`).  Streaming is
produced after the upstream call has finished: the events carry the whole reply, one delta per block.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from ..exchange import ChatRequest, ClientError, Generation, new_id

__all__ = ["Dialect", "sampling", "sse", "text_of", "want"]


class Dialect(ABC):
    name: ClassVar[str]
    summary: ClassVar[str]
    #: The generation route (also served under ``/sessions/{sid}``).
    path: ClassVar[str]
    #: The token-counting route, for the dialects that have one.
    count_path: ClassVar[str | None] = None
    #: How this wire's tool-call ids start (a reply's ids are the ones the client echoes back).
    call_prefix: ClassVar[str] = "call_"
    #: A header only this dialect's clients send (``anthropic-version``), naming it where the route does not.
    marker: ClassVar[str | None] = None

    def call_id(self) -> str:
        return new_id(self.call_prefix)

    @abstractmethod
    def parse(self, body: Any) -> ChatRequest:
        """The request body (parsed JSON) as a ChatRequest; ``ClientError`` for what cannot be translated."""

    @abstractmethod
    def response(self, request: ChatRequest, generation: Generation, model: str) -> dict[str, Any]:
        """The non-streaming response body."""

    @abstractmethod
    def events(self, request: ChatRequest, generation: Generation, model: str) -> list[bytes]:
        """The streaming response: SSE messages, in order."""

    @abstractmethod
    def error(self, status: int, message: str) -> dict[str, Any]:
        """The error body in this dialect's shape."""

    def count_response(self, tokens: int) -> dict[str, Any]:
        """The token-counting response (dialects with ``count_path``)."""
        raise NotImplementedError

    def models(self, name: str) -> dict[str, Any]:
        """``GET /v1/models``: the one model the gateway serves, as this wire lists models (OpenAI's list)."""
        return {"object": "list", "data": [{"id": name, "object": "model", "created": 0, "owned_by": "tito"}]}

    def routes(self, path: str) -> bool:
        """Whether ``path`` (under ``/sessions/{id}`` or not) is one of this dialect's routes."""
        return path.endswith(self.path) or bool(self.count_path and path.endswith(self.count_path))


def sse(data: Any, event: str | None = None) -> bytes:
    """One server-sent event: an optional ``event:`` line and the JSON ``data:`` line."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def want(value: Any, kind: type | tuple[type, ...], where: str) -> Any:
    """``value`` if it is a ``kind``, else ``ClientError`` naming ``where``."""
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ClientError(f"{where} must be a number, got a boolean")
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise ClientError(f"{where} must be {names}, got {type(value).__name__}")
    return value


def text_of(content: Any, where: str, text_types: tuple[str, ...]) -> str:
    """A content value (a string, or a list of text parts of ``text_types``) as one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = want(content, list, where)
    texts = []
    for i, part in enumerate(parts):
        part = want(part, dict, f"{where}[{i}]")
        kind = part.get("type")
        if kind not in text_types:
            raise ClientError(
                f"{where}[{i}]: content of type {kind!r} is not supported (a text-only model: {', '.join(text_types)})"
            )
        texts.append(want(part.get("text"), str, f"{where}[{i}].text"))
    return "".join(texts)


def sampling(request: ChatRequest, body: dict[str, Any], max_keys: tuple[str, ...]) -> None:
    """The sampling fields most dialects share, checked and copied into ``request``."""
    for key in max_keys:
        if body.get(key) is not None:
            request.max_tokens = want(body[key], int, key)
            if request.max_tokens < 1:
                raise ClientError(f"{key} must be at least 1")
            break
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            setattr(request, key, float(want(body[key], (int, float), key)))
    if body.get("top_k") is not None:
        request.top_k = want(body["top_k"], int, "top_k")
    if body.get("model") is not None:
        request.model = want(body["model"], str, "model")
    if body.get("stream") is not None:
        request.stream = want(body["stream"], bool, "stream")
