"""Session ids: where they come from, which are usable (what the gateway remembers of each: recorder.py)."""

from __future__ import annotations

import re
from typing import Any

from .exchange import ClientError

__all__ = ["SESSION_ID", "check_session_id", "session_from_headers"]

#: A usable session id: letters, digits and ``. _ : @ + = ~ -``, starting with a letter or digit, at most 256.
SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@+=~-]{0,255}")


def check_session_id(value: str, source: str) -> str:
    """``value`` if it is a usable session id, else a 400 saying where it came from and what is allowed."""
    if not SESSION_ID.fullmatch(value):
        shown = value if len(value) <= 80 else value[:77] + "..."
        raise ClientError(
            f"unusable session id {shown!r} (from {source}): use 1-256 letters, digits and . _ : @ + = ~ -, "
            "starting with a letter or digit"
        )
    return value


def session_from_headers(headers: Any) -> str:
    """The session id a client without a ``/sessions/{sid}`` prefix sends: its bearer token, else x-api-key."""
    authorization = headers.get("authorization") or ""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return check_session_id(token.strip(), "the Authorization bearer token")
    key = headers.get("x-api-key")
    if key:
        return check_session_id(key.strip(), "the x-api-key header")
    raise ClientError(
        "no session id: send the request to /sessions/{id}/v1/..., or set the API key to the session id "
        "(Authorization: Bearer <id> or x-api-key: <id>)"
    )
