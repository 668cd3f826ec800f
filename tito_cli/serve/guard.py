"""What the gateway refuses before any route runs, and the client bodies it reads: loopback is not a trust boundary.

Any web page a browser has open can send requests to ``127.0.0.1``; a DNS name rebound to it can read
the answers.  :class:`Guard` (an ASGI middleware) refuses, in the dialect's error shape:

* a request with an ``Origin`` header not given with ``--allow-origin`` (403): a browser sends one with
  every cross-site request, an agent CLI or SDK never does;
* a ``Host`` header that does not name the gateway (403): ``localhost``, ``127.0.0.1``, ``[::1]`` or the
  bound address, with the listening port (a rebound DNS name carries its own name).  Checked when the
  gateway is bound to a loopback address (the default); bound to another, clients on other machines name
  it as they reach it;
* a POST whose body is declared as anything but JSON (415): ``text/plain`` and form bodies are what a
  page may send cross-site without asking first.

It also tells :mod:`.pools` how large the request's body is (its ``Content-Length``).

:func:`client_json` reads a client's body as the log's reader reads JSON (``capture/records.py``):
strict JSON in UTF-8, no ``NaN``/``Infinity`` and no number beyond float64 (which reads as infinity), no
lone surrogate in any string, at most :data:`MAX_DEPTH` levels deep; anything else is a 400 before the
upstream is called, never a turn the log then refuses.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Callable
from typing import Any

from starlette.types import ASGIApp, Receive, Scope, Send

from ..capture.records import fast_json, strict_loads
from .dialects import Dialect, dialect_for
from .exchange import ClientError
from .pools import mark_request

__all__ = ["MAX_DEPTH", "Guard", "allowed_hosts", "client_json", "is_loopback"]

#: How deeply a client's JSON body may nest (a tool's JSON schema needs a few dozen levels at most; the
#: interpreter's recursion limit, which rendering and recording would hit, is about 1,000).
MAX_DEPTH = 128

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether ``--host`` binds a loopback address only (where a browser's DNS rebinding is the threat)."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """The ``Host`` header values that name a gateway bound to ``host``:``port`` (with port 80, also without it)."""
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = {*_LOOPBACK_NAMES, bound.lower()}
    values = {f"{name}:{port}" for name in names}
    if port == 80:
        values |= names
    return frozenset(values)


class Guard:
    """The ASGI middleware in front of every route (see the module's docstring).

    The ``Host`` check applies when the gateway is bound to a loopback address (the default): bound to
    another (``--host 0.0.0.0`` on a cluster's network), agents on other machines name it as they reach
    it.  The port is the listening socket's (the ASGI ``server``), else ``port``.
    """

    def __init__(
        self, app: ASGIApp, *, host: str, port: int, allow_origins: tuple[str, ...] = (), dialects: list[Dialect]
    ) -> None:
        self.app = app
        self.host = host
        self.port = port
        self.check_host = is_loopback(host)
        self.origins = frozenset(origin.rstrip("/").lower() for origin in allow_origins)
        self.dialects = dialects
        self._hosts: dict[int, frozenset[str]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {key.lower(): value for key, value in scope["headers"]}
        server = scope.get("server")
        # An ASGI server that names no port (in-process transports) serves the scheme's default one.
        port = (server[1] or (443 if scope.get("scheme") == "https" else 80)) if server else self.port
        refused = self.refusal(scope["method"], headers, port)
        if refused is None:
            declared = headers.get(b"content-length", b"")
            mark_request(int(declared) if declared.isdigit() else None)
            await self.app(scope, receive, send)
            return
        status, message = refused
        error = self._error_shape(scope["path"], headers)
        data = json.dumps(error(status, message), ensure_ascii=True).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data, "more_body": False})

    def refusal(self, method: str, headers: dict[bytes, bytes], port: int) -> tuple[int, str] | None:
        """The status and message a request to ``port`` is refused with, or None to let it through."""
        origin = headers.get(b"origin")
        if origin is not None:
            shown = origin.decode("latin-1")
            if shown.rstrip("/").lower() not in self.origins:
                return 403, (
                    f"requests from the web origin {shown[:100]!r} are refused (a browser page cannot use the "
                    "gateway; start it with --allow-origin to let one)"
                )
        host = headers.get(b"host", b"").decode("latin-1").lower()
        if self.check_host and host and host not in self._allowed(port):
            return 403, (
                f"the Host {host[:100]!r} does not name this gateway (localhost, 127.0.0.1, [::1] or the "
                "address it is bound to, with its port)"
            )
        if method == "POST":
            kind = headers.get(b"content-type")
            if kind is not None and not _is_json(kind):
                return 415, (
                    f"the request body's content type is {kind.decode('latin-1')[:100]!r}: "
                    "send JSON (content-type: application/json)"
                )
        return None

    def _allowed(self, port: int) -> frozenset[str]:
        hosts = self._hosts.get(port)
        if hosts is None:
            hosts = self._hosts[port] = allowed_hosts(self.host, port)
        return hosts

    def _error_shape(self, path: str, headers: dict[bytes, bytes]) -> Callable[[int, str], dict[str, Any]]:
        names = {name.decode("latin-1").lower() for name in headers}
        return dialect_for(self.dialects, path, names).error


def _is_json(kind: bytes) -> bool:
    media = kind.split(b";", 1)[0].strip().lower()
    return media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json"))


def client_json(data: bytes, what: str = "the request body") -> Any:
    """A client's body as the log's reader would read it back, or ``ClientError`` (400) saying what is wrong."""
    try:
        value = fast_json()(data)
    except RecursionError:
        raise ClientError(f"{what} is nested more than {MAX_DEPTH} levels deep") from None
    except ValueError:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ClientError(f"{what} is not UTF-8 (byte {exc.start})") from None
        try:
            value = strict_loads(text.removeprefix("\ufeff"), what)
        except ValueError as exc:  # NaN and Infinity, malformed JSON, nesting beyond the parser
            raise ClientError(str(exc).replace("is not valid JSON", "is not JSON")) from None
    problem = _first_problem(value)
    if problem is not None:
        raise ClientError(f"{what}: {problem}")
    return value


def _first_problem(value: Any) -> str | None:
    """What the log cannot hold in ``value`` (the first found, with its place), or None."""
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)]
    while stack:
        item, depth, place = stack.pop()
        kind = type(item)
        if kind is str:
            if not item.isascii() and not _utf8(item):
                return f"{_place(place)} holds a lone surrogate (not UTF-8): the log cannot store it"
        elif kind is float:
            if not math.isfinite(item):
                return f"{_place(place)} is a number beyond float64 (it reads as infinity): not JSON the log can hold"
        elif kind is dict or kind is list:
            if depth > MAX_DEPTH:
                return f"{_place(place)} is nested more than {MAX_DEPTH} levels deep"
            if kind is dict:
                for key, child in item.items():
                    if not key.isascii() and not _utf8(key):
                        return f"a key of {_place(place)} holds a lone surrogate (not UTF-8): the log cannot store it"
                    stack.append((child, depth + 1, (place, key)))
            else:
                for index, child in enumerate(item):
                    stack.append((child, depth + 1, (place, index)))
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _place(place: Any) -> str:
    """``messages[2].content`` from the linked (parent, key) pairs; ``the body`` at the top."""
    parts: list[str] = []
    while place is not None:
        place, key = place
        shown = key if isinstance(key, int) else key.encode("utf-8", "backslashreplace").decode()
        parts.append(f"[{shown}]" if isinstance(key, int) else f".{shown}")
    if not parts:
        return "the body"
    text = "".join(reversed(parts)).lstrip(".")
    return text if len(text) <= 200 else "..." + text[-197:]
