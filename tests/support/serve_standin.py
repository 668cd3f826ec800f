"""The inference-server stand-in for the gateway tests: the package's demo upstream, plus injected faults.

The wires (SGLang's native ``/generate``, vLLM's chat with ``return_token_ids``) and the generation
through the real tokenizer are :class:`tito_cli.serve.demo.DemoUpstream`'s, the same server
``tito demo-upstream`` runs; see its module for what it answers. The tests add what a demo never needs:
``fail_next`` makes the next request(s) answer 5xx, hang, drop the connection, answer late, or drip the
answer a byte at a time; ``tamper_next`` rewrites the next answer's JSON (ids or logprobs no real server
would send: the gateway's checks are tested with them); ``delay`` slows every generation request. Every
answer is kept in ``ledger``.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from tito_cli.serve.demo import DemoUpstream, qwen3_output
from tito_cli.serve.demo.server import Script
from tito_cli.tokenizer import load

from .helpers import REPO

__all__ = ["QWEN3", "Fault", "StandIn", "qwen3_output"]

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"


@dataclass
class Fault:
    """One injected fault: ``status`` (answer ``code``), ``hang`` (silent ``seconds``, then drop), ``close``
    (drop at once), ``slow`` (answer normally after ``seconds``)."""

    kind: str
    code: int = 503
    seconds: float = 30.0


@functools.lru_cache(maxsize=8)
def _tokenizer(folder: Path) -> Any:
    """The tokenizer in ``folder``, loaded once per test process (each load of Qwen3's takes about a second;
    a stand-in only encodes and decodes with it)."""
    return load(folder)


class StandIn(DemoUpstream):
    """The stand-in server (a context manager); ``url`` is its base URL once entered."""

    def __init__(
        self,
        script: Script,
        tokenizer: str | Path = QWEN3,
        *,
        model: str = "qwen3-standin",
        port: int = 0,
        family: str = "qwen3",
    ) -> None:
        super().__init__(script, _tokenizer(Path(tokenizer).resolve()), model=model, port=port, family=family)
        #: Seconds every generation request waits before it is answered.
        self.delay = 0.0
        self.faults_served: list[str] = []
        self._faults: deque[Fault] = deque()
        self._tampers: deque[Callable[[dict[str, Any]], Any]] = deque()

    def __enter__(self) -> StandIn:
        super().__enter__()
        return self

    def fail_next(self, kind: str = "status", *, count: int = 1, code: int = 503, seconds: float = 30.0) -> None:
        """The next ``count`` generation requests fail: ``status`` (answer ``code``), ``hang``, ``close``, ``slow``,
        ``drip`` (the answer's body one byte every ``seconds``)."""
        if kind not in ("status", "hang", "close", "slow", "drip"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._faults.extend(Fault(kind, code, seconds) for _ in range(count))

    def tamper_next(self, rewrite: Callable[[dict[str, Any]], Any], *, count: int = 1) -> None:
        """``rewrite(answer)`` changes the next ``count`` non-streamed generation answers in place before they are
        sent: what a broken or hostile server would answer."""
        with self._lock:
            self._tampers.extend(rewrite for _ in range(count))

    def outgoing(self, answer: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            rewrite = self._tampers.popleft() if self._tampers else None
        if rewrite is not None:
            rewrite(answer)
        return answer

    def write_body(self, handler: BaseHTTPRequestHandler, data: bytes) -> None:
        drip = getattr(handler, "drip", None)
        handler.drip = None  # type: ignore[attr-defined]
        if drip is None:
            handler.wfile.write(data)
            return
        for i in range(len(data)):  # bounded: one byte each interval until the body is out or the stand-in closes
            if self.wait(drip):
                return
            try:
                handler.wfile.write(data[i : i + 1])
                handler.wfile.flush()
            except OSError:
                return

    def _take_fault(self) -> Fault | None:
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
            if fault is not None:
                self.faults_served.append(fault.kind)
            return fault

    def before_generation(self, handler: BaseHTTPRequestHandler) -> bool:
        fault = self._take_fault()
        handler.drip = fault.seconds if fault is not None and fault.kind == "drip" else None  # type: ignore[attr-defined]
        if fault is not None and fault.kind == "slow":
            self.wait(fault.seconds)
        elif fault is not None and fault.kind != "drip":
            self._fail(handler, fault)
            return False
        if self.delay:
            self.wait(self.delay)
        return True

    def _fail(self, handler: Any, fault: Fault) -> None:
        if fault.kind == "status":
            error = {"object": "error", "message": "stand-in fault", "type": "ServiceUnavailable", "code": fault.code}
            handler.send_json(fault.code, error)
            return
        if fault.kind == "hang":
            self.wait(fault.seconds)
        handler.close_connection = True
        with contextlib.suppress(OSError):
            handler.connection.shutdown(socket.SHUT_RDWR)
