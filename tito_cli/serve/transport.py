"""The upstream leg: one shared HTTP client that POSTs a JSON body and hands back the answer's bytes.

The upstreams (:mod:`.upstreams`) only translate: a request into a body, an answer into a
:class:`~.exchange.Generation`.  This module sends the body.  Every failure leaves as an
:class:`~.exchange.UpstreamError` whose message names the route, never the upstream's address (its
``detail``, for the gateway's log line, does): the upstream's own status when it answered one of 400
and above, 504 when ``--upstream-timeout`` passed before the whole answer was in (connecting, waiting, a
body that drips in), 502 when it could not be reached.

The client is aiohttp's: measured against httpx's ``AsyncClient`` on the gateway's own workload
(``benchmarks/serve_transport.py``: a 190 kB conversation out, a 32k-token prompt's ids back), it spends
0.7 ms of CPU a request where httpx spends 2.0 (``docs/notes/serve-benchmark-2026-12-06b.md``).  Its
pool holds at most ``max_connections`` connections, each dropped after ``--upstream-keepalive`` idle
seconds, below the usual server's keep-alive timeout, so a connection the upstream is closing is not
reused.  A call whose task is cancelled (the client left) closes its connection.
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import TYPE_CHECKING

from .exchange import UpstreamError

if TYPE_CHECKING:
    import aiohttp

    from .config import ServeConfig

__all__ = ["Transport", "error_text"]

_JSON = {"content-type": "application/json"}
#: Bodies up to this size are handed to the socket whole (aiohttp's own bound for raw bytes).
_WHOLE_BYTES = 1 << 20


class Transport:
    """POSTs to the upstream at ``config.upstream`` through one pooled client (open it inside the event loop)."""

    def __init__(self, config: ServeConfig) -> None:
        import aiohttp

        self.base = config.upstream.rstrip("/")
        self.timeout = config.upstream_timeout
        connector = aiohttp.TCPConnector(
            limit=config.max_connections, limit_per_host=0, keepalive_timeout=config.upstream_keepalive
        )
        self._session: aiohttp.ClientSession = aiohttp.ClientSession(
            connector=connector,
            timeout=aiohttp.ClientTimeout(total=config.upstream_timeout, connect=config.connect_timeout),
            cookie_jar=aiohttp.DummyCookieJar(),  # an upstream's cookies are not the next session's
            # No proxy from the environment: the upstream is the gateway's own inference server (and
            # aiohttp would look the proxy up in a worker thread on every request).
            trust_env=False,
        )

    async def post(self, path: str, payload: bytes, headers: dict[str, str] | None = None) -> bytes:
        """The body of the upstream's answer to ``payload`` POSTed as JSON at ``path``; an UpstreamError else."""
        import aiohttp

        url = self.base + path
        sent = {**_JSON, **headers} if headers else _JSON
        # Past 1 MiB aiohttp sends a body from a BytesIO in 64 KiB pieces, yielding to the loop between them.
        data = io.BytesIO(payload) if len(payload) > _WHOLE_BYTES else payload
        try:
            async with self._session.post(url, data=data, headers=sent) as answer:
                content: bytes = await answer.read()  # (typed: aiohttp is Any where the serve extra is absent)
                status = answer.status
        except (asyncio.TimeoutError, TimeoutError):  # aiohttp's connect and total deadlines are TimeoutErrors
            raise UpstreamError(
                f"the upstream did not answer {path} within {self.timeout:g} s (--upstream-timeout)", 504, detail=url
            ) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise UpstreamError(
                f"the upstream could not be reached for {path} ({type(exc).__name__})",
                detail=f"{url}: {type(exc).__name__}: {exc}",
            ) from None
        if status >= 400:
            # The upstream's own status goes to the client (a prompt too long for the context is its 400).
            raise UpstreamError(f"the upstream answered {status}: {error_text(content)}", status, detail=url)
        return content

    async def close(self) -> None:
        await self._session.close()


def error_text(content: bytes) -> str:
    """What an upstream's error answer says: its JSON ``error``/``message``/``detail``, else its text."""
    text = content[:2000].decode("utf-8", "replace")
    try:
        data = json.loads(content)
    except ValueError:
        return text.strip() or "(no body)"
    if isinstance(data, dict):
        error = data.get("error", data.get("message", data.get("detail")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            return str(error)[:2000]
    return text
