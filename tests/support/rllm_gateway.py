"""The real rLLM model gateway, run on 127.0.0.1 in front of the vLLM-shaped upstream, and an agent driving it.

Used by ``test_import_rllm.py`` and by ``import_sources/make_rllm.py`` (which
keeps one such trace store for the docs).  The gateway runs as its own
process (its CLI, SQLite store) and is always stopped: SIGTERM (it drains
pending trace writes), then kill after a bound.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
from openai import OpenAI

from .vllm_upstream import Upstream, Versions

__all__ = ["DEADLINE", "SYSTEM", "TOOLS", "drive", "running_gateway", "script", "stop", "wait_for_traces"]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "multiply",
            "description": "Multiply two integers.",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
        },
    }
]
SYSTEM = {"role": "system", "content": "You are a terse calculator."}
#: Bounds every wait on the gateway: start-up, trace persistence, shutdown.
DEADLINE = 60.0


def script(messages: list[dict[str, Any]], tools: Any) -> dict[str, Any]:
    last = messages[-1]
    if last["role"] == "tool":
        return {"content": f"The product is {last['content']}."}
    if tools:
        call = {"id": "call_1", "type": "function", "function": {"name": "multiply", "arguments": '{"a": 6, "b": 7}'}}
        return {"content": None, "tool_calls": [call]}
    return {"content": f"You said: {last['content']}"}


def drive(base: str) -> dict[str, int]:
    """Three agent sessions through the gateway's session URLs; returns the calls made per session."""

    def client(sid: str) -> OpenAI:
        return OpenAI(base_url=f"{base}/sessions/{sid}/v1", api_key="unused", max_retries=0, timeout=30)

    # A tool call, its result, the final answer.
    c = client("tool-session")
    messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": "What is 6 times 7?"}]
    first = c.chat.completions.create(model="fixture", messages=messages, tools=TOOLS)
    call = first.choices[0].message.tool_calls[0]
    function = {"name": call.function.name, "arguments": call.function.arguments}
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.id, "type": "function", "function": function}],
        }
    )
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "42"})
    c.chat.completions.create(model="fixture", messages=messages, tools=TOOLS)

    # The same prompt sent twice (a retry), then a follow-up on the first answer.
    c = client("retry-session")
    messages = [{"role": "user", "content": "hello there"}]
    answer = c.chat.completions.create(model="fixture", messages=messages)
    c.chat.completions.create(model="fixture", messages=messages)
    reply = {"role": "assistant", "content": answer.choices[0].message.content}
    messages += [reply, {"role": "user", "content": "again"}]
    c.chat.completions.create(model="fixture", messages=messages)

    # Streamed: two turns.
    c = client("stream-session")
    messages = [SYSTEM, {"role": "user", "content": "count to three"}]
    stream = c.chat.completions.create(model="fixture", messages=messages, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "thanks"}]
    for _ in c.chat.completions.create(model="fixture", messages=messages, stream=True):
        pass
    return {"tool-session": 2, "retry-session": 3, "stream-session": 2}


def wait_for_traces(base: str, expected: dict[str, int]) -> None:
    """Traces are stored after the response is sent: wait (bounded) until the store holds them all."""
    start = time.monotonic()
    while True:
        counts = {sid: len(httpx.get(f"{base}/sessions/{sid}/traces", timeout=5).json()) for sid in expected}
        if counts == expected:
            return
        assert time.monotonic() - start < DEADLINE, f"traces stored: {counts}, expected {expected}"
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_gateway(db: Path, log_path: Path, versions: Versions | None = None) -> Iterator[SimpleNamespace]:
    """The gateway process in front of the upstream, storing traces in ``db``; stopped on exit.

    ``versions``: the weight versions the upstream reports on its non-streamed answers (none by default).
    """
    with Upstream(script, versions) as upstream:
        port = free_port()
        command = [
            sys.executable, "-m", "rllm_model_gateway", "--host", "127.0.0.1", "--port", str(port),
            "--worker", f"http://127.0.0.1:{upstream.port}/v1", "--db-path", str(db), "--store", "sqlite",
            "--log-level", "warning",
        ]  # fmt: skip
        with log_path.open("w") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"}
            )
            base = f"http://127.0.0.1:{port}"
            try:
                start = time.monotonic()
                while True:
                    try:
                        if httpx.get(f"{base}/health", timeout=2).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    assert process.poll() is None, log_path.read_text()
                    assert time.monotonic() - start < DEADLINE, "the gateway did not start"
                    time.sleep(0.2)
                yield SimpleNamespace(base=base, db=db, upstream=upstream, process=process)
            finally:
                stop(process)


def stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the gateway drains its pending trace writes on shutdown), then kill after a bound."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
