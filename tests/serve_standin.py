"""The inference-server stand-in for the gateway tests: the package's demo upstream, plus injected faults.

The wires (SGLang's native ``/generate``, vLLM's chat with ``return_token_ids``) and the generation
through the real tokenizer are :class:`tito_cli.serve.demo.DemoUpstream`'s, the same server
``tito demo-upstream`` runs; see its module for what it answers. The tests add what a demo never needs:
``fail_next`` makes the next request(s) answer 5xx, hang, drop the connection, or answer late;
``delay`` slows every generation request. Every answer is kept in ``ledger``.
"""

from __future__ import annotations

import contextlib
import functools
import socket
from collections import deque
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

    def __enter__(self) -> StandIn:
        super().__enter__()
        return self

    def fail_next(self, kind: str = "status", *, count: int = 1, code: int = 503, seconds: float = 30.0) -> None:
        """The next ``count`` generation requests fail: ``status`` (answer ``code``), ``hang``, ``close``, ``slow``."""
        if kind not in ("status", "hang", "close", "slow"):
            raise ValueError(f"unknown fault {kind!r}")
        with self._lock:
            self._faults.extend(Fault(kind, code, seconds) for _ in range(count))

    def _take_fault(self) -> Fault | None:
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
            if fault is not None:
                self.faults_served.append(fault.kind)
            return fault

    def before_generation(self, handler: BaseHTTPRequestHandler) -> bool:
        fault = self._take_fault()
        if fault is not None and fault.kind == "slow":
            self.wait(fault.seconds)
        elif fault is not None:
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
