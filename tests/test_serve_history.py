"""``tito serve --history canonical``: prompts that continue the held token history, and the fallbacks.

The Qwen3 template drops earlier reasoning once a new user message arrives, so under ``render`` a
session with a second user message drifts (its prompt stops extending the tokens generated); under
``canonical`` every continued turn's prompt is exactly the previous turn's prompt and output followed
by the new messages' tokens, and the rebuild has no drift fork.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild
from tito_cli.serve.template import ChatTemplate
from tito_cli.turns import Turn

from .serve_helpers import QWEN3_NAME, Gateway, need_extras
from .serve_standin import StandIn, qwen3_output

need_extras("starlette", "uvicorn", "httpx")

import httpx  # noqa: E402

TOOLS = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]


def script(messages: Any) -> str:
    """Two tool calls per user message, each with reasoning, then an answer with reasoning."""
    text = str(messages)
    users = text.count("<|im_start|>user\n") - text.count("<|im_start|>user\n<tool_response>")
    since = text.rsplit("<|im_start|>user\n", 1)[-1]
    tools_since = text.count("<tool_response>") - 2 * (users - 1)
    if tools_since < 2:
        return qwen3_output("", f"Plan {users}.{tools_since}.", [("run", {"cmd": f"step {users}.{tools_since}"})])
    return qwen3_output(f"Done with request {users}.", f"Wrap up {users}.") if since else ""


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(script) as server:
        yield server


@pytest.fixture(scope="module", params=["render", "canonical"])
def gateway(
    request: pytest.FixtureRequest, standin: StandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    logs = tmp_path_factory.mktemp(f"history-{request.param}")
    with Gateway(standin.url, logs, extra=["--history", request.param, "--flush-every", "0.2"]) as gw:
        gw.history = request.param  # type: ignore[attr-defined]
        yield gw


def call(gateway: Gateway, session: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        json={"model": "m", "messages": messages, "tools": TOOLS},
        headers={"x-api-key": session},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    message: dict[str, Any] = answer.json()["choices"][0]["message"]
    return message


def converse(gateway: Gateway, session: str, users: int) -> list[dict[str, Any]]:
    """A coding-agent conversation: per user message two tool round trips, then an answer."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are careful."}]
    for u in range(users):
        messages.append({"role": "user", "content": f"Request {u + 1}."})
        for _ in range(3):
            reply = call(gateway, session, messages)
            messages.append(reply)
            for c in reply.get("tool_calls") or []:
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": "ok"})
    return messages


def turns_of(logs: Path, session: str, expected: int) -> list[Turn]:
    deadline = time.monotonic() + 20
    turns: list[Turn] = []
    while time.monotonic() < deadline:
        if list(logs.glob("*.parquet")):
            turns = [t for rows in TurnLog.open([logs]).iter_sessions({session}) for t in parse_session(rows)]
            if len(turns) >= expected:
                return turns
        time.sleep(0.1)
    raise AssertionError(f"{len(turns)} turns of {session}, expected {expected}")


def samples_of(logs: Path, out: Path, session: str) -> list[dict[str, Any]]:
    rebuild([logs], out, overwrite=True, workers=1)
    return [r for r in pq.read_table(out).to_pylist() if r["session_id"] == session]


def test_a_second_user_message_drifts_under_render_and_continues_under_canonical(
    gateway: Gateway, standin: StandIn, tmp_path: Path
) -> None:
    mode = gateway.history  # type: ignore[attr-defined]
    session = f"two-requests-{mode}"
    first = len(standin.ledger)
    converse(gateway, session, users=2)
    entries = standin.ledger[first:]
    turns = turns_of(gateway.logs, session, len(entries))
    assert [t.prompt_ids.tolist() for t in turns] == [e["prompt_ids"] for e in entries]
    assert [t.output_ids.tolist() for t in turns] == [e["output_ids"] for e in entries]
    extends = [
        after.prompt_ids.tolist()[: len(before.prompt_ids) + len(before.output_ids)]
        == [*before.prompt_ids.tolist(), *before.output_ids.tolist()]
        for before, after in itertools.pairwise(turns)
    ]
    samples = samples_of(gateway.logs, tmp_path / "samples.parquet", session)
    trained = [
        t for s in samples for t, m in zip(s["tokens"][-s["response_length"] :], s["loss_mask"], strict=True) if m
    ]
    generated = [t for e in entries for t in e["output_ids"]]
    if mode == "render":
        # The turn after the second user message lost the earlier reasoning: it does not extend them.
        assert not all(extends) and turns[0].metadata.get("history") is None
        assert len(samples) > 1
    else:
        assert all(extends)
        assert [t.metadata["history"] for t in turns] == ["rendered"] + ["canonical"] * (len(turns) - 1)
        assert turns[0].metadata["history_reason"] == "first turn of the session"
        assert len(samples) == 1 and trained == generated


@pytest.mark.parametrize("gateway", ["canonical"], indirect=True)
def test_canonical_falls_back_with_a_reason_and_renders_as_render_would(gateway: Gateway) -> None:
    session = "fallbacks"
    messages = converse(gateway, session, users=1)  # turns 0..2
    template = ChatTemplate(QWEN3_NAME)
    # A sub-agent in the same session: its own conversation.
    call(gateway, session, [{"role": "user", "content": "Sub-task: list files."}])  # turn 3
    # The main conversation goes on: it still continues its own held head.
    call(gateway, session, [*messages, {"role": "user", "content": "More."}])  # turn 4
    # A rewritten earlier message (compaction or an edited history).
    rewritten = [messages[0], {"role": "user", "content": "Request 1, rephrased."}, *messages[2:]]
    call(gateway, session, [*rewritten, {"role": "user", "content": "More."}])  # turn 5
    # A retry from the first turn.
    call(gateway, session, messages[:2])  # turn 6
    turns = turns_of(gateway.logs, session, 7)
    history = [(t.metadata["history"], t.metadata.get("history_reason", "")) for t in turns]
    assert [h for h, _ in history] == [
        "rendered",
        "canonical",
        "canonical",
        "rendered",
        "canonical",
        "rendered",
        "rendered",
    ]
    assert "does not continue" in history[3][1] and "does not continue" in history[5][1]
    assert "no new message" in history[6][1] or "does not continue" in history[6][1]
    for turn in (turns[3], turns[5], turns[6]):
        assert turn.prompt_ids.tolist() == template.prompt_ids(turn.prompt_messages, turn.tools)
