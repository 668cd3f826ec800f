"""tito serve --history canonical with the real SDKs: continued turns extend the held tokens, no drift forks.

The scripted model writes tool arguments in its own compact spelling (which Qwen3's template
re-serializes) and reasoning (which the template drops once a new user message arrives): under
``render`` the rebuild forks or realigns there; under ``canonical`` every continued turn's prompt ids
extend the previous turn's tokens exactly, the rebuild shows no drift, and the trained tokens are
still exactly the generated ones (the stand-in's ledger).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve_helpers import ANTHROPIC_TOOLS, OPENAI_TOOLS, need_extras
from tests.support.serve_inprocess import InProcessGateway as Gateway
from tests.support.serve_standin import StandIn
from tito_cli import Corpus, Policy
from tito_cli.algorithm.session import SessionResult

need_extras("starlette", "uvicorn", "httpx", "anthropic", "openai")

import anthropic  # noqa: E402
import openai  # noqa: E402

from tests.support.serve_checks import (  # noqa: E402
    assert_rebuild_trains_each_output_once,
    assert_turns_are_the_ledger_in_order,
    session_turns,
)

FOLLOW_UP = "Now run the tests."
SUB_AGENT = "You are a sub-agent that lists files."


def _call(reasoning: str, content: str, cmd: str) -> str:
    # Compact JSON, as models often write it: Qwen3's template re-renders arguments with tojson's spacing.
    arguments = json.dumps({"cmd": cmd}, separators=(",", ":"))
    call = f'<tool_call>\n{{"name": "run", "arguments": {arguments}}}\n</tool_call>'
    return f"<think>\n{reasoning}\n</think>\n\n{content}\n{call}"


def model(prompt: str) -> str:
    """The scripted model, from the decoded prompt: build, answer, then (after the follow-up) test, answer."""
    if SUB_AGENT in prompt:
        return "<think>\nJust list.\n</think>\n\na.py b.py"
    results = prompt.count("<tool_response>")
    if FOLLOW_UP not in prompt:
        if results == 0:
            return _call("Build first.", "Building.", "make")
        return "<think>\nThe build passed.\n</think>\n\nThe build passes."
    if results == 1:
        return _call("Now the tests.", "Testing.", "make test")
    return "<think>\nAll green.\n</think>\n\nThe tests pass."


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(model) as server:
        yield server


@pytest.fixture(scope="module", params=["canonical", "render"])
def gateway(
    request: pytest.FixtureRequest, standin: StandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    logs = tmp_path_factory.mktemp(f"logs-{request.param}")
    with Gateway(standin.url, logs, api="generate", flush_every=0.2, history=request.param) as gw:
        gw.history = request.param  # type: ignore[attr-defined]
        yield gw


def chat_session(client: openai.OpenAI) -> int:
    """Build, answer; a sub-agent's own request in between; then the follow-up: test, answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "Make the build pass."},
    ]
    calls = 0
    for step in range(4):
        if step == 2:
            sub = [{"role": "system", "content": SUB_AGENT}, {"role": "user", "content": "List the files."}]
            client.chat.completions.create(model="m", messages=sub, max_tokens=256)  # type: ignore[arg-type]
            calls += 1
            messages.append({"role": "user", "content": FOLLOW_UP})
        response = client.chat.completions.create(
            model="m", messages=messages, tools=OPENAI_TOOLS, max_tokens=256  # type: ignore[arg-type]
        )
        calls += 1
        message = response.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        for call in message.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "ok: 0 errors"})
    return calls


def anthropic_session(client: anthropic.Anthropic) -> int:
    """The same over Anthropic Messages, streamed, thinking echoed with signatures, cache_control moving."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Make the build pass."}]}]
    for step in range(4):
        if step == 2:
            messages.append({"role": "user", "content": [{"type": "text", "text": FOLLOW_UP}]})
        sent = json.loads(json.dumps(messages))
        sent[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        with client.messages.stream(
            model="m",
            max_tokens=256,
            system=[{"type": "text", "text": "You are a careful engineer."}],
            messages=sent,  # type: ignore[arg-type]
            tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
            thinking={"type": "enabled", "budget_tokens": 128},
        ) as events:
            blocks = [b.model_dump(exclude_none=True) for b in events.get_final_message().content]
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if uses:
            results = [{"type": "tool_result", "tool_use_id": b["id"], "content": "ok: 0 errors"} for b in uses]
            messages.append({"role": "user", "content": results})
    return 4


def drift(logs: Path, session_id: str) -> int:
    """The session's forks and realigns under slime-v4."""
    [result] = [r for r in Corpus.open([logs]).results(Policy.named("slime-v4"), only=[session_id])]
    assert isinstance(result, SessionResult)
    return sum(result.report.forks.values()) + result.report.realigns


@pytest.mark.slow
@pytest.mark.parametrize("wire", ["chat", "anthropic"])
def test_canonical_history_removes_drift_forks_and_trains_exactly_the_generated_tokens(
    gateway: Gateway, standin: StandIn, tmp_path: Path, wire: str
) -> None:
    history = gateway.history  # type: ignore[attr-defined]
    session = f"{wire}-{history}"
    first = len(standin.ledger)
    if wire == "chat":
        with openai.OpenAI(base_url=gateway.url + "/v1", api_key=session, max_retries=0) as client:
            calls = chat_session(client)
    else:
        with anthropic.Anthropic(base_url=gateway.url, auth_token=session, max_retries=0) as aclient:
            calls = anthropic_session(aclient)
    entries = standin.ledger[first:]
    turns = session_turns(gateway.logs, session, calls)
    assert_turns_are_the_ledger_in_order(turns, entries, "generate")
    if history == "render":
        assert all("history" not in t.metadata for t in turns)
        assert drift(gateway.logs, session) >= 2  # arguments re-serialized, reasoning dropped
        return
    assert drift(gateway.logs, session) == 0
    # Every generated token trained, once.
    assert_rebuild_trains_each_output_once(gateway.logs, tmp_path / f"samples-{session}.parquet", session, entries)
    main = [t for t in turns if SUB_AGENT not in json.dumps(t.prompt_messages)]
    assert [(t.metadata["history"], t.metadata.get("history_reason")) for t in main] == [
        ("rendered", "no held turn"),
        ("canonical", None),
        ("canonical", None),
        ("canonical", None),
    ]
    for before, after in itertools.pairwise(main):
        held = [*before.prompt_ids.tolist(), *before.output_ids.tolist()]
        assert after.prompt_ids.tolist()[: len(held)] == held
    if wire == "chat":  # the sub-agent's own conversation falls back, and the main one still continues after it
        [sub] = [t for t in turns if SUB_AGENT in json.dumps(t.prompt_messages)]
        assert (sub.metadata["history"], sub.metadata["history_reason"]) == ("rendered", "history rewritten")
