"""Request bodies recorded from the real CLIs (``tests/serve_cases/``) replayed through ``tito serve``.

Claude Code 2.1.197 and Codex 0.171.0 sent these (docs/notes/cli-wire.md: long strings cut, most tools
dropped). Replayed with their own headers, each answers with the SSE events the CLI needs (an Anthropic
``tool_use`` block then ``message_stop``; a Responses ``function_call`` item then ``response.completed``)
and records one turn per request; what the CLI's history carries (the mid-list ``system`` message, the
``developer`` messages, the tool output) reaches the recorded prompt.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import REPO, needs
from tests.support.serve_checks import assert_turns_are_the_ledger, turns_by_session
from tests.support.serve_helpers import need_extras
from tests.support.serve_inprocess import InProcessGateway as Gateway
from tests.support.serve_standin import StandIn, qwen3_output

httpx = needs("httpx", "serve", module_level=True)  # skipped without the serve extra, failed under CI

CASES = REPO / "tests" / "serve_cases"


def case(name: str) -> dict[str, Any]:
    recorded: dict[str, Any] = json.loads((CASES / name).read_text(encoding="utf-8"))
    return recorded


def script(conversation: Any) -> str:
    """A shell call until a tool result is in the conversation, then a short answer."""
    text = conversation if isinstance(conversation, str) else json.dumps(conversation)
    if "<tool_response>" in text or '"role": "tool"' in text:
        return qwen3_output("The file says hello.", reasoning="The tool printed it.")
    if "Codex CLI" in text:
        return qwen3_output(reasoning="Read it.", calls=[("exec_command", {"cmd": "cat notes.txt"})])
    return qwen3_output(reasoning="Read it.", calls=[("Bash", {"command": "cat notes.txt"})])


def events(body: str) -> list[tuple[str, dict[str, Any]]]:
    """An SSE body as (event name, data) pairs."""
    out = []
    for block in body.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        out.append((fields.get("event", ""), json.loads(fields["data"])))
    return out


def replay(url: str, recorded: dict[str, Any], session: str) -> list[tuple[str, dict[str, Any]]]:
    headers = {k: v for k, v in recorded["headers"].items() if k not in ("authorization", "content-length")}
    headers["authorization"] = f"Bearer {session}"
    response = httpx.post(url + recorded["path"], json=recorded["body"], headers=headers, timeout=120)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return events(response.text)


@dataclass
class Replayed:
    claude: list[list[tuple[str, dict[str, Any]]]]  # each recorded Claude Code request's answer, as SSE events
    codex: list[list[tuple[str, dict[str, Any]]]]
    ledger: list[dict[str, Any]]
    logs: Path


@pytest.fixture(scope="module", params=["generate", "chat"])
def replayed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    """The recorded requests of both CLIs, replayed through one gateway in front of the ``request.param`` upstream."""
    need_extras("starlette", "uvicorn", "httpx")
    logs = tmp_path_factory.mktemp(f"recorded-{request.param}") / "logs"
    with StandIn(script) as standin, Gateway(standin.url, logs, api=request.param) as gateway:
        claude = [replay(gateway.url, case(f"claude_code_turn{n}.json"), "cc-1") for n in (1, 2)]
        codex = [replay(gateway.url, case(f"codex_turn{n}.json"), "cx-1") for n in (1, 2)]
        ledger = list(standin.ledger)
    return Replayed(claude, codex, ledger, logs)


@pytest.mark.slow
def test_recorded_claude_code_requests_get_anthropic_streams(replayed: Replayed) -> None:
    claude = replayed.claude
    # Claude Code: a tool_use block and stop_reason tool_use, then a text answer; message_stop closes each.
    first, second = ([name for name, _ in stream] for stream in claude)
    assert first[0] == "message_start" and first[-2:] == ["message_delta", "message_stop"]
    blocks = [data["content_block"]["type"] for name, data in claude[0] if name == "content_block_start"]
    assert blocks == ["thinking", "tool_use"]
    assert [data["delta"]["stop_reason"] for name, data in claude[0] if name == "message_delta"] == ["tool_use"]
    assert [data["delta"]["stop_reason"] for name, data in claude[1] if name == "message_delta"] == ["end_turn"]
    assert second[-1] == "message_stop"


def test_recorded_codex_requests_get_responses_streams(replayed: Replayed) -> None:
    codex = replayed.codex
    # Codex: a function_call item, then a message; response.completed closes each.
    for stream, kind in zip(codex, ("function_call", "message"), strict=True):
        names = [name for name, _ in stream]
        assert names[0] == "response.created" and names[-1] == "response.completed"
        done = [data["item"]["type"] for name, data in stream if name == "response.output_item.done"]
        assert kind in done
    items = [data["item"] for name, data in codex[0] if name == "response.output_item.done"]
    [call] = [item for item in items if item["type"] == "function_call"]
    assert call["name"] == "exec_command" and json.loads(call["arguments"]) == {"cmd": "cat notes.txt"}



def test_recorded_requests_are_logged_as_the_upstream_saw_them(replayed: Replayed) -> None:
    ledger = replayed.ledger
    turns = turns_by_session(replayed.logs)
    assert sorted(turns) == ["cc-1", "cx-1"]
    assert_turns_are_the_ledger([t for ts in turns.values() for t in ts], ledger)
    for sid, wire, agent in (("cc-1", "anthropic", "claude-cli/2.1.197"), ("cx-1", "responses", "codex_exec/0.171.0")):
        assert [t.seq for t in turns[sid]] == [0, 1]
        assert all(t.metadata is not None and t.metadata["wire"] == wire for t in turns[sid])
        assert all(str(t.metadata["user_agent"]).startswith(agent) for t in turns[sid] if t.metadata)
    cc, cx = (json.dumps(turns[sid][0].prompt_messages) for sid in ("cc-1", "cx-1"))
    # Claude Code's mid-list system message (after the last user message) is kept, not dropped.
    assert "Available agent types for the Agent tool" in cc
    assert "You are a coding agent running in the Codex CLI" in cx
    # The tool outputs the CLIs sent back are in the second prompts.
    assert '"hello"' in json.dumps(turns["cc-1"][1].prompt_messages)
    assert "Output:\\nhello" in json.dumps(turns["cx-1"][1].prompt_messages)
