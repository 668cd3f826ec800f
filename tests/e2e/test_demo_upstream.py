"""Acceptance: a new user's path, with the demo upstream that ships with tito and the real agent CLIs.

``tito demo-upstream`` and ``tito serve`` run as subprocesses, as docs/serve.md starts them; the real Claude
Code and Codex (``npm ci --prefix tests/npm``) are each told to create a file with given content and read
it back. The demo model answers with a shell call writing the file, then one reading it, then the text it
read: the task passes only if each CLI ran both tools and their output came back through the gateway. Both
sessions are finished with a reward over HTTP, and ``tito ls``, ``inspect`` and ``view`` show them with their
tool calls and rewards.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import tito_process
from tests.support.cli_drivers import CliRun, run_claude, run_codex
from tests.support.helpers import REPO
from tests.support.serve_checks import page_data
from tests.support.serve_helpers import Gateway, free_port, need_extras
from tests.support.serve_standin import QWEN3, _tokenizer
from tito_cli.serve.demo import DemoUpstream, demo_agent
from tito_cli.serve.demo.agent import HELP, Messages

need_extras("starlette", "uvicorn", "httpx")

import httpx  # noqa: E402

TASK = "Create a file named hello.txt containing 'hello from tito', then read it back."
ANSWER = "hello.txt holds: hello from tito"
REWARDS = {"claude-demo": 1.0, "codex-demo": 0.5}


class DemoProcess:
    """``tito demo-upstream --port P`` as a subprocess, until SIGTERM."""

    def __init__(self, output: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.output = output

    def __enter__(self) -> DemoProcess:
        with self.output.open("wb") as sink:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tito_cli", "demo-upstream", "--port", str(self.port)],
                cwd=REPO, stdout=sink, stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.output.read_text()
            try:
                if httpx.get(self.url + "/health", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.process.kill()
        raise AssertionError("tito demo-upstream did not answer /health in 60 s")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.returncode = self.process.wait(timeout=30)


@dataclass
class Runs:
    claude: CliRun
    codex: CliRun
    finished: dict[str, dict[str, object]]
    demo_exit: int
    logs: Path
    work: Path


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    work = tmp_path_factory.mktemp("demo")
    logs = work / "logs"
    with DemoProcess(work / "demo.log") as demo, Gateway(demo.url, logs, tokenizer="qwen3") as gateway:
        with ThreadPoolExecutor(2) as pool:
            claude = pool.submit(run_claude, gateway.url, "claude-demo", TASK, work / "claude")
            codex = pool.submit(
                run_codex, gateway.url, "codex-demo", TASK, work / "codex", sandbox="workspace-write"
            )
            claude_run, codex_run = claude.result(), codex.result()
        finished = {
            sid: httpx.post(f"{gateway.url}/sessions/{sid}/finish", json={"reward": reward}, timeout=10).json()
            for sid, reward in REWARDS.items()
        }
    yield Runs(claude_run, codex_run, finished, demo.returncode, logs, work)


def test_both_clis_write_the_file_and_read_it_back(runs: Runs) -> None:
    assert runs.claude.returncode == 0, runs.claude.describe()
    result = json.loads(runs.claude.stdout)
    assert result["result"] == ANSWER and result["num_turns"] == 3, runs.claude.describe()
    assert runs.codex.returncode == 0, runs.codex.describe()
    assert runs.codex.stdout.strip() == ANSWER, runs.codex.describe()
    for run in (runs.claude, runs.codex):
        assert (run.workdir / "hello.txt").read_text() == "hello from tito\n", run.describe()
    # SIGTERM ends the demo upstream cleanly.
    assert runs.demo_exit == 0


def test_sessions_are_finished_and_listed_with_their_rewards(runs: Runs) -> None:
    assert {sid: (f["finished"], f["reward"], f["turns"]) for sid, f in runs.finished.items()} == {
        "claude-demo": (True, 1.0, 3),
        "codex-demo": (True, 0.5, 3),
    }
    done = tito_process("ls", str(runs.logs), "--json", cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = {row["session"]: row for row in json.loads(done.stdout)}
    assert {sid: (row["turns"], row["reward"]) for sid, row in rows.items()} == {
        "claude-demo": (3, 1.0),
        "codex-demo": (3, 0.5),
    }


@pytest.mark.parametrize(("sid", "tool"), [("claude-demo", "Bash"), ("codex-demo", "exec_command")])
def test_inspect_and_view_show_the_tool_calls(runs: Runs, sid: str, tool: str) -> None:
    done = tito_process("inspect", sid, str(runs.logs), "--json", cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert (facts["session"]["reward"], facts["session"]["finished"]) == (REWARDS[sid], True)
    text = json.dumps(facts)
    assert "'hello from tito' > hello.txt" in text and "cat hello.txt" in text
    page = runs.work / f"{sid}.html"
    done = tito_process("view", sid, "--logs", str(runs.logs), "--out", str(page), cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    session = page_data(page.read_text(encoding="utf-8"))["sessions"][sid]
    assert tool in json.dumps(session) and "hello from tito" in json.dumps(session)


def test_the_agent_reads_chat_messages_as_it_reads_qwen3_prompts() -> None:
    """The same three steps through vLLM's chat wire (messages and tools), and help for an unknown task."""
    tools = [{"type": "function", "function": {"name": "Bash", "parameters": {}}}]
    with DemoUpstream(demo_agent, _tokenizer(QWEN3.resolve())) as demo:
        messages: list[dict[str, object]] = [{"role": "user", "content": TASK}]
        for step in range(2):
            body = {"model": "m", "messages": messages, "tools": tools, "return_token_ids": True}
            reply = httpx.post(demo.url + "/v1/chat/completions", json=body, timeout=30).json()
            message = reply["choices"][0]["message"]
            assert reply["choices"][0]["finish_reason"] == "tool_calls"
            call = message["tool_calls"][0]
            command = json.loads(call["function"]["arguments"])["command"]
            assert command == ("printf '%s\\n' 'hello from tito' > hello.txt", "cat hello.txt")[step]
            messages += [
                {"role": "assistant", "content": "", "tool_calls": message["tool_calls"]},
                {"role": "tool", "tool_call_id": call["id"], "content": "hello from tito\n" if step else ""},
            ]
        body = {"model": "m", "messages": messages, "tools": tools, "return_token_ids": True}
        reply = httpx.post(demo.url + "/v1/chat/completions", json=body, timeout=30).json()
        assert reply["choices"][0]["message"]["content"] == ANSWER
    assert HELP in demo_agent(Messages([{"role": "user", "content": "hi"}], tools))
