"""The real Claude Code and Codex CLIs run a tool-using task through ``tito serve``, and the log trains on it.

Each CLI (installed by ``npm ci --prefix tests/npm``; the test skips without it, fails under ``CI``) is told
to read a file in its working directory. The scripted model (the inference stand-in, generating through the
real Qwen3 tokenizer) first asks for a shell command that prints the file, then answers with what the tool
printed. So the task passes only if the gateway's reply made the CLI run the tool and the tool's output came
back in the next request. Then the log is checked turn by turn against what the stand-in received and
generated, rebuilt with ``tito rebuild`` (trained tokens = generated tokens) and shown with ``tito view``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_drivers import CliRun, run_claude, run_codex
from tests.support.serve_checks import (
    assert_rebuild_trains_the_generated_tokens,
    assert_turns_are_the_ledger,
    assert_view_shows,
    turns_by_session,
)
from tests.support.serve_helpers import Gateway, need_extras
from tests.support.serve_standin import StandIn, qwen3_output

#: What the file holds: a word no prompt contains unless the tool's output reached it.
SECRET = "marmalade-7f3a"
FILES = {"notes.txt": f"The password is {SECRET}.\n"}
TASK = "Read the file notes.txt in the current directory and tell me the password it holds."


def _tool_output(conversation: Any) -> str | None:
    """What the tool printed, once it is in the conversation (None before the tool ran).

    The stand-in hands a script the request's messages (chat upstream) or the decoded prompt text
    (generate upstream); the first request holds no tool output, the second ends with it.
    """
    if isinstance(conversation, str):
        # Qwen3's template wraps each tool result in <tool_response> blocks.
        if "<tool_response>" not in conversation:
            return None
        return conversation.rsplit("<tool_response>", 1)[1].split("</tool_response>", 1)[0]
    results = [m for m in conversation if m.get("role") == "tool"]
    if not results:
        return None
    content = results[-1].get("content")
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return str(content)


def scripted_model(tool_name: str, arguments: dict[str, Any]) -> Callable[[Any], str]:
    """Qwen3's raw output: a shell call to ``tool_name`` first, then the answer read from its result."""

    def script(conversation: Any) -> str:
        output = _tool_output(conversation)
        if output is None:
            return qwen3_output(reasoning="I should read notes.txt with the shell.", calls=[(tool_name, arguments)])
        found = SECRET if SECRET in output else f"not in the tool output ({output[:200]!r})"
        return qwen3_output(f"The password is {found}.", reasoning="The tool printed the file.")

    return script


CLAUDE = scripted_model("Bash", {"command": "cat notes.txt", "description": "Print notes.txt"})
CODEX = scripted_model("exec_command", {"cmd": "cat notes.txt"})


def script(conversation: Any) -> str:
    """Both CLIs share one stand-in: Codex's instructions name it, and its shell tool is ``exec_command``."""
    text = conversation if isinstance(conversation, str) else json.dumps(conversation[:2])
    return CODEX(conversation) if "Codex CLI" in text else CLAUDE(conversation)


@dataclass
class Runs:
    upstream_api: str
    claude: CliRun
    codex: CliRun
    ledger: list[dict[str, Any]]
    logs: Path
    work: Path
    #: Each prompt the upstream received, decoded.
    received: list[str]


@pytest.fixture(scope="module", params=["generate", "chat"])
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    """Claude Code and Codex at once, each in its own session, through one gateway in front of ``upstream_api``."""
    need_extras("starlette", "uvicorn", "httpx")
    upstream_api = request.param
    work = tmp_path_factory.mktemp(f"cli-{upstream_api}")
    logs = work / "logs"
    with StandIn(script) as standin, Gateway(standin.url, logs, api=upstream_api) as gateway:
        with ThreadPoolExecutor(2) as pool:
            claude = pool.submit(run_claude, gateway.url, CLAUDE_SESSION, TASK, work / "claude", files=FILES)
            codex = pool.submit(run_codex, gateway.url, CODEX_SESSION, TASK, work / "codex", files=FILES)
            claude_run, codex_run = claude.result(), codex.result()
        ledger = list(standin.ledger)
        received = [standin.decode(entry["prompt_ids"]) for entry in ledger]
    return Runs(upstream_api, claude_run, codex_run, ledger, logs, work, received)


CLAUDE_SESSION = "claude-code-1"
CODEX_SESSION = "codex-1"


def test_claude_code_runs_the_tool_and_answers_from_its_output(runs: Runs) -> None:
    run = runs.claude
    assert run.returncode == 0, run.describe()
    result = json.loads(run.stdout)
    assert result["is_error"] is False, run.describe()
    # The answer quotes the file: the Bash call ran and its output reached the model's next prompt.
    assert result["result"] == f"The password is {SECRET}.", run.describe()
    assert result["num_turns"] == 2


def test_codex_runs_the_tool_and_answers_from_its_output(runs: Runs) -> None:
    run = runs.codex
    assert run.returncode == 0, run.describe()
    assert run.stdout.strip() == f"The password is {SECRET}.", run.describe()
    assert "cat notes.txt" in run.stderr, run.describe()


def test_every_turn_is_what_the_upstream_received_and_generated(runs: Runs) -> None:
    turns = turns_by_session(runs.logs)
    assert sorted(turns) == sorted([CLAUDE_SESSION, CODEX_SESSION])
    wires = {CLAUDE_SESSION: "anthropic", CODEX_SESSION: "responses"}
    agents = {CLAUDE_SESSION: "claude-cli/", CODEX_SESSION: "codex_exec/"}
    for sid, session_turns in turns.items():
        # Each task takes two generations: the tool call, then the answer.
        assert [t.seq for t in session_turns] == [0, 1], sid
        for turn in session_turns:
            assert turn.metadata is not None and turn.metadata["wire"] == wires[sid]
            assert str(turn.metadata["user_agent"]).startswith(agents[sid])
        # The tool's output is in the second prompt only, as messages and as the ids the model saw.
        assert SECRET not in json.dumps(session_turns[0].prompt_messages)
        assert SECRET in json.dumps(session_turns[1].prompt_messages)
    assert_turns_are_the_ledger([t for ts in turns.values() for t in ts], runs.ledger)
    # And the ids: the file's text is in exactly two of the four prompts the model saw (each second turn).
    assert sorted(SECRET in text for text in runs.received) == [False, False, True, True]


def test_the_log_trains_exactly_the_generated_tokens_and_view_shows_both_sessions(runs: Runs) -> None:
    turns = turns_by_session(runs.logs)
    samples = runs.work / "samples.parquet"
    assert assert_rebuild_trains_the_generated_tokens(runs.logs, samples, turns) >= 2
    assert_view_shows(runs.logs, runs.work / "view.html", samples)
