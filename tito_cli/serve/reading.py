"""A request read: its session id, and its body as JSON within ``--max-request-bytes``.

Bodies up to :data:`~.upstreams.base.INLINE_BYTES` are parsed on the event loop; larger ones in a worker
thread (``offload``), so that the loop only waits.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request

from .exchange import ClientError
from .guard import client_json
from .sessions import check_session_id, session_from_headers
from .upstreams.base import INLINE_BYTES

__all__ = ["json_body", "offload_if", "session_of"]

Offload = Callable[..., Awaitable[Any]]


def session_of(request: Request) -> str:
    """The session a request belongs to: its ``/sessions/{id}`` path, else its headers (``ClientError``)."""
    sid = request.path_params.get("sid")
    if sid is not None:
        return check_session_id(sid, "the /sessions/{id} path")
    return session_from_headers(request.headers)


async def offload_if(offload: Offload, heavy: bool, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: in a worker thread when ``heavy``, else here (a small job costs less than the hand-over)."""
    return await offload(fn, *args) if heavy else fn(*args)


async def json_body(request: Request, limit: int, offload: Offload) -> tuple[Any, bytes]:
    """The parsed JSON body and its bytes; 413 beyond ``limit`` bytes, 400 for what is not JSON."""
    declared = request.headers.get("content-length")
    too_big = declared is not None and declared.isdigit() and int(declared) > limit
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            too_big = True
        if not too_big:
            chunks.append(chunk)
        elif size > 4 * limit + len(chunk):
            break  # read (and dropped) enough to answer; the connection is closed after the 413
    if too_big:
        raise ClientError(f"the request body is larger than {limit} bytes (--max-request-bytes)", 413)
    data = b"".join(chunks)
    try:
        parsed = await offload_if(offload, len(data) > INLINE_BYTES, client_json, data)
    except RecursionError:
        raise ClientError("the request body is nested too deeply") from None
    return parsed, data
