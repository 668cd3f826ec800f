"""Running a real ``tito serve`` in the gateway tests: a subprocess on a free 127.0.0.1 port.

``Gateway(upstream_url, logs)`` starts ``python -m tito_cli serve`` (this checkout's code, the
interpreter running the tests), waits until ``GET /healthz`` answers, and on exit sends SIGTERM and
waits (bounded) for it to finish its in-flight requests and close the log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .helpers import REPO, needs

__all__ = [
    "ANTHROPIC_TOOLS",
    "BASH_TOOLS",
    "OPENAI_TOOLS",
    "QWEN3_NAME",
    "Gateway",
    "converse",
    "free_port",
    "need_extras",
    "recorder_of",
]

#: The tokenizer the gateway tests render with and record (tito's shipped copy of Qwen3's).
QWEN3_NAME = "fixtures/tokenizers/qwen3"


#: The tool the SDK agents call (``run``), in the OpenAI shape and in the Anthropic shape.
OPENAI_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "n": {"type": "integer"}}},
        },
    }
]
ANTHROPIC_TOOLS: list[dict[str, Any]] = [
    {
        "name": t["function"]["name"],
        "description": t["function"]["description"],
        "input_schema": t["function"]["parameters"],
    }
    for t in OPENAI_TOOLS
]

#: The ``bash`` tool the scripted in-process sessions declare (OpenAI shape).
BASH_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]

#: The extra installing each module the gateway tests need.
_EXTRA_OF = {"starlette": "serve", "uvicorn": "serve", "httpx": "serve", "anthropic": "clients", "openai": "clients"}


def need_extras(*modules: str) -> None:
    """Each of ``modules`` importable, or a skip naming its extra (a failure under ``CI``).

    Called at the top of a test module as well as inside a test.
    """
    for module in modules:
        needs(module, _EXTRA_OF[module], module_level=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Gateway:
    """A ``tito serve`` subprocess; ``url`` is its base URL, ``process`` the Popen."""

    def __init__(
        self,
        upstream: str,
        logs: str | os.PathLike[str],
        *,
        api: str = "generate",
        tokenizer: str | None = QWEN3_NAME,
        extra: list[str] | None = None,
        startup_timeout: float = 90.0,
        stop_timeout: float = 60.0,
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.logs = Path(logs)
        self.args = [
            sys.executable,
            "-m",
            "tito_cli",
            "serve",
            "--logs",
            str(logs),
            "--upstream",
            upstream,
            "--upstream-api",
            api,
            "--port",
            str(self.port),
            *(["--tokenizer", tokenizer] if tokenizer else []),
            *(extra or []),
        ]
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.process: subprocess.Popen[bytes] | None = None
        self.stderr_path = self.logs.parent / f"gateway-{self.port}.stderr"

    def __enter__(self) -> Gateway:
        self.start()
        return self.ready()

    def start(self) -> None:
        """Launch the process without waiting for it (several gateways can start side by side)."""
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115  (closed by __exit__)
        self.process = subprocess.Popen(self.args, cwd=REPO, env=env, stdout=self._stderr, stderr=subprocess.STDOUT)

    def ready(self) -> Gateway:
        """Wait until the started gateway answers /healthz (killed and RuntimeError if it does not)."""
        import httpx

        assert self.process is not None, "start() first"
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tito serve exited with {self.process.returncode}:\n{self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"tito serve did not answer /healthz in {self.startup_timeout} s:\n{self.output()}")

    def output(self) -> str:
        """What the gateway wrote to stdout and stderr so far."""
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def terminate(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` and wait (bounded) for the exit status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(sig)
            try:
                self.process.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        return int(self.process.returncode)

    def kill(self) -> None:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None:
            self.terminate()
        self._stderr.close()


def converse(url: str, sid: str, messages: list[dict[str, Any]], answered: list[str], turns: int) -> None:
    """Go on with a chat-completions session until it has ``turns`` answers or the gateway goes away.

    Each answer's content is appended to ``answered`` and sent back with a new user message; at most
    ``turns`` requests are made.
    """
    import httpx

    while len(answered) < turns:
        try:
            answer = httpx.post(
                url + "/v1/chat/completions",
                json={"model": "m", "messages": messages},
                headers={"x-api-key": sid},
                timeout=30,
            )
            answer.raise_for_status()
            message = answer.json()["choices"][0]["message"]
        except (httpx.HTTPError, ValueError, KeyError):
            return  # the gateway is going away
        answered.append(message["content"])
        messages += [{"role": "assistant", "content": message["content"]}, {"role": "user", "content": "next"}]


def recorder_of(app: Any) -> Any:
    """The recorder of the gateway behind an app ``create_app`` made (the app outlives its lifespan)."""
    for route in app.routes:
        endpoint = getattr(route, "endpoint", None)
        owner = getattr(endpoint, "__self__", None)
        if owner is not None and hasattr(owner, "recorder"):
            return owner.recorder
    raise AssertionError("no gateway behind the app")
