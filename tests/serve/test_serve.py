"""tito serve with the real anthropic and openai SDKs, against the inference-server stand-in.

Every recorded turn is checked against the stand-in's ledger: the prompt ids it received, the output
ids and logprobs it generated; a rebuild of the log trains exactly the generated tokens.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve_checks import (
    assert_rebuild_trains_each_output_once,
    assert_turns_are_the_ledger_in_order,
    session_turns,
)
from tests.support.serve_helpers import ANTHROPIC_TOOLS, OPENAI_TOOLS, need_extras
from tests.support.serve_inprocess import InProcessGateway as Gateway
from tests.support.serve_standin import StandIn, qwen3_output
from tito_cli.read.turnlog import TurnLog

need_extras("starlette", "uvicorn", "httpx", "anthropic", "openai")

import anthropic  # noqa: E402
import httpx  # noqa: E402
import openai  # noqa: E402

STEPS = 2  # tool round trips before the scripted agent answers

_OPEN: list[Any] = []


def oai(base_url: str, key: str) -> openai.OpenAI:
    """An OpenAI SDK client, closed after the test."""
    client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0)
    _OPEN.append(client)
    return client


def ant(base_url: str, *, auth_token: str | None = None, api_key: str | None = None) -> anthropic.Anthropic:
    """An Anthropic SDK client, closed after the test."""
    client = anthropic.Anthropic(base_url=base_url, auth_token=auth_token, api_key=api_key, max_retries=0)
    _OPEN.append(client)
    return client


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()


def tool_results(conversation: Any) -> int:
    """How many tool results the conversation holds (messages for chat, rendered text for generate)."""
    if isinstance(conversation, str):
        return conversation.count("<tool_response>")
    return sum(1 for m in conversation if m.get("role") == "tool")


BROKEN = '<tool_call>\n{"name": "run", "arguments": {"cmd": \n</tool_call>'


def agent(conversation: Any) -> str:
    """The scripted model: think, call ``run`` STEPS times, then answer (``[broken]``: an unreadable call)."""
    if "[broken]" in str(conversation):
        return BROKEN
    done = tool_results(conversation)
    if done < STEPS:
        return qwen3_output(
            f"Step {done}.", f"I should run step {done}.", [("run", {"cmd": f"make step{done}", "n": done})]
        )
    return qwen3_output(f"All {done} steps passed. Ünïcode ok.", "Everything ran.")


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(agent) as server:
        yield server


@pytest.fixture(scope="module", params=["generate", "chat"])
def gateway(
    request: pytest.FixtureRequest, standin: StandIn, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    logs = tmp_path_factory.mktemp(f"logs-{request.param}")
    with Gateway(standin.url, logs, api=request.param, flush_every=0.2) as gw:
        gw.api = request.param  # type: ignore[attr-defined]
        yield gw


# -- reading what was recorded ------------------------------------------------------------------


# -- the SDK agents -------------------------------------------------------------------------------


def chat_agent(client: openai.OpenAI, stream: bool) -> int:
    """A chat-completions agent loop; returns how many generation calls it made."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "Make the build pass."},
    ]
    for calls in range(1, 10):
        if stream:
            content, reasoning, tool_calls = "", "", {}
            with client.chat.completions.create(
                model="m",
                messages=messages,
                tools=OPENAI_TOOLS,
                stream=True,
                max_tokens=512,  # type: ignore[arg-type]
            ) as chunks:
                for chunk in chunks:
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    content += delta.content or ""
                    reasoning += getattr(delta, "reasoning_content", None) or ""
                    for call in delta.tool_calls or []:
                        entry = tool_calls.setdefault(
                            call.index, {"id": call.id, "type": "function", "function": {"name": "", "arguments": ""}}
                        )
                        entry["function"]["name"] += call.function.name or ""
                        entry["function"]["arguments"] += call.function.arguments or ""
            message: dict[str, Any] = {"role": "assistant", "content": content or None}
            if reasoning:
                message["reasoning_content"] = reasoning
            if tool_calls:
                message["tool_calls"] = [tool_calls[i] for i in sorted(tool_calls)]
        else:
            response = client.chat.completions.create(
                model="m",
                messages=messages,
                tools=OPENAI_TOOLS,
                max_tokens=512,  # type: ignore[arg-type]
            )
            message = response.choices[0].message.model_dump(exclude_none=True)
        messages.append(message)
        if not message.get("tool_calls"):
            assert "steps passed" in (message.get("content") or "")
            return calls
        for call in message["tool_calls"]:
            args = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"ran {args['cmd']}: ok"})
    raise AssertionError("the agent did not finish")


def anthropic_agent(client: anthropic.Anthropic, stream: bool) -> int:
    """A Messages agent loop with thinking echoed, cache_control moved each turn, and a mid-list system message."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "text", "text": "Make the build pass."}]}]
    for calls in range(1, 10):
        # cache_control sits on the latest message's last block only (Claude Code moves it each turn).
        sent = json.loads(json.dumps(messages))
        sent[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
        kwargs: dict[str, Any] = {
            "model": "m",
            "max_tokens": 512,
            "system": [{"type": "text", "text": "You are a careful engineer.", "cache_control": {"type": "ephemeral"}}],
            "messages": sent,
            "tools": ANTHROPIC_TOOLS,
            "thinking": {"type": "enabled", "budget_tokens": 256},
        }
        if stream:
            with client.messages.stream(**kwargs) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        blocks = [b.model_dump(exclude_none=True) for b in message.content]
        messages.append({"role": "assistant", "content": blocks})
        uses = [b for b in blocks if b["type"] == "tool_use"]
        if not uses:
            assert message.stop_reason == "end_turn"
            assert any(b["type"] == "thinking" and b["signature"] for b in blocks)
            return calls
        assert message.stop_reason == "tool_use"
        results = [
            {
                "type": "tool_result",
                "tool_use_id": b["id"],
                "content": [{"type": "text", "text": f"ran {b['input']['cmd']}: ok"}],
            }
            for b in uses
        ]
        messages.append({"role": "user", "content": results})
    raise AssertionError("the agent did not finish")


def responses_agent(client: openai.OpenAI, stream: bool) -> int:
    """A Responses agent loop as Codex drives it: stateless, the whole input each time, items echoed."""
    items: list[dict[str, Any]] = [
        {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "You are a careful engineer."}],
        },
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Make the build pass."}]},
    ]
    tools = [{"type": "function", **OPENAI_TOOLS[0]["function"]}, {"type": "web_search"}]
    for calls in range(1, 10):
        kwargs: dict[str, Any] = {
            "model": "m",
            "input": items,
            "tools": tools,
            "store": False,
            "max_output_tokens": 512,
        }
        if stream:
            with client.responses.stream(**kwargs) as events:
                response = events.get_final_response()
        else:
            response = client.responses.create(**kwargs)
        output = [item.model_dump(exclude_none=True) for item in response.output]
        items.extend(output)
        fcalls = [item for item in output if item["type"] == "function_call"]
        if not fcalls:
            assert "steps passed" in response.output_text
            return calls
        for call in fcalls:
            args = json.loads(call["arguments"])
            items.append(
                {"type": "function_call_output", "call_id": call["call_id"], "output": f"ran {args['cmd']}: ok"}
            )
    raise AssertionError("the agent did not finish")


# -- the tests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("wire", ["chat", "anthropic", "responses"])
def test_sdk_sessions_record_what_the_upstream_saw_and_generated(
    gateway: Gateway, standin: StandIn, tmp_path: Path, wire: str, stream: bool
) -> None:
    api = gateway.api  # type: ignore[attr-defined]
    session = f"{wire}-{api}-{'sse' if stream else 'json'}"
    first = len(standin.ledger)
    if wire == "anthropic":
        calls = anthropic_agent(ant(gateway.url, auth_token=session), stream)
    elif wire == "responses":
        calls = responses_agent(oai(gateway.url + "/v1", session), stream)
    else:
        calls = chat_agent(oai(gateway.url + "/v1", session), stream)
    assert calls == STEPS + 1
    entries = standin.ledger[first:]
    report = httpx.get(f"{gateway.url}/sessions/{session}", timeout=60).json()
    assert [t["seq"] for t in report["turns"]] == list(range(calls))
    turns = session_turns(gateway.logs, session, calls)
    assert_turns_are_the_ledger_in_order(turns, entries, api)
    for i, turn in enumerate(turns):
        assert turn.metadata["wire"] == wire
        assert turn.metadata["user_agent"].startswith("Anthropic/Python" if wire == "anthropic" else "OpenAI/Python")
        # The upstream's own reason: SGLang's finish_reason.type; vLLM's finish_reason (tool_calls on a call).
        assert turn.finish_reason == ("tool_calls" if api == "chat" and i < STEPS else "stop")
    assert turns[0].response_message["tool_calls"][0]["function"]["name"] == "run"
    assert turns[-1].response_message["content"].startswith("All 2 steps passed")
    # Each turn's prompt continues the previous turn: the echo matched the recorded reply exactly.
    for before, after in itertools.pairwise(turns):
        assert after.prompt_messages[: len(before.prompt_messages) + 1] == [
            *before.prompt_messages,
            before.response_message,
        ]
    if wire == "responses":
        assert turns[0].metadata["dropped_tools"] == ["web_search"]
    assert_rebuild_trains_each_output_once(gateway.logs, tmp_path / f"samples-{session}.parquet", session, entries)


def read_log(logs: Path) -> TurnLog:
    return TurnLog.open([logs])


def test_claude_code_shapes_mid_list_system_moved_cache_control_and_count_tokens(
    gateway: Gateway, standin: StandIn
) -> None:
    """What Claude Code sends: ?beta=true, x-api-key, a system message mid-list, cache_control and signatures moving."""
    session = f"claude-shapes-{gateway.api}"  # type: ignore[attr-defined]
    client = ant(gateway.url, api_key=session)
    system = [{"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}]
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Fix the build.", "cache_control": {"type": "ephemeral"}}],
        },
        {"role": "system", "content": "The user prefers small commits."},
    ]
    counted = client.messages.count_tokens(model="m", system=system, messages=messages, tools=ANTHROPIC_TOOLS)  # type: ignore[arg-type]
    first = len(standin.ledger)
    reply = client.beta.messages.create(
        model="m", max_tokens=512, system=system, messages=messages, tools=ANTHROPIC_TOOLS
    )  # type: ignore[arg-type]
    assert len(standin.ledger[first]["prompt_ids"]) == counted.input_tokens
    blocks = [b.model_dump(exclude_none=True) for b in reply.content]
    assert [b["type"] for b in blocks] == ["thinking", "text", "tool_use"]
    # The client echoes with another signature and moves cache_control to the newest block.
    blocks[0]["signature"] = "a-different-signature"
    messages[0]["content"][0].pop("cache_control")
    tool_use = blocks[2]
    messages += [
        {"role": "assistant", "content": blocks},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": tool_use["id"],
                    "content": "ok",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    client.beta.messages.create(model="m", max_tokens=512, system=system, messages=messages, tools=ANTHROPIC_TOOLS)  # type: ignore[arg-type]
    turns = session_turns(gateway.logs, session, 2)
    assert_turns_are_the_ledger_in_order(turns, standin.ledger[first : first + 2], gateway.api)  # type: ignore[attr-defined]
    assert turns[0].prompt_messages == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "Fix the build."},
        {"role": "user", "content": "<system-reminder>\nThe user prefers small commits.\n</system-reminder>\n"},
    ]
    assert turns[1].prompt_messages[: len(turns[0].prompt_messages) + 1] == [
        *turns[0].prompt_messages,
        turns[0].response_message,
    ]
    assert turns[1].prompt_messages[-1] == {"role": "tool", "content": "ok", "tool_call_id": tool_use["id"]}
    assert turns[0].tools == [{"type": "function", "function": {**OPENAI_TOOLS[0]["function"]}}]


@pytest.mark.parametrize("wire", ["chat", "anthropic", "responses"])
def test_session_ids_from_the_path_and_refused_when_unusable(gateway: Gateway, standin: StandIn, wire: str) -> None:
    good = f"path-{wire}-{gateway.api}"  # type: ignore[attr-defined]
    bodies = {
        "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        "anthropic": (
            "/v1/messages",
            {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
        ),
        "responses": ("/v1/responses", {"model": "m", "input": "hi", "store": False}),
    }
    path, body = bodies[wire]
    # The path's id wins over the key.
    answer = httpx.post(
        f"{gateway.url}/sessions/{good}{path}", json=body, headers={"authorization": "Bearer other"}, timeout=60
    )
    assert answer.status_code == 200, answer.text
    assert len(httpx.get(f"{gateway.url}/sessions/{good}", timeout=60).json()["turns"]) == 1
    assert httpx.get(f"{gateway.url}/sessions/other", timeout=60).status_code == 404
    for url, headers in [
        (f"{gateway.url}/sessions/bad%20id{path}", {}),
        (f"{gateway.url}{path}", {"authorization": "Bearer " + "x" * 300}),
        (f"{gateway.url}{path}", {}),
    ]:
        refused = httpx.post(url, json=body, headers=headers, timeout=60)
        assert refused.status_code == 400
        error = refused.json()
        message = error["error"]["message"]
        assert ("session id" in message) and (
            error["type"] == "error" if wire == "anthropic" else "type" in error["error"]
        )


def test_finish_writes_the_sessions_row_once(gateway: Gateway, standin: StandIn) -> None:
    session = f"finished-{gateway.api}"  # type: ignore[attr-defined]
    client = oai(f"{gateway.url}/sessions/{session}/v1", "unused")
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    finish = {"reward": 0.75, "metadata": {"task": "t1"}, "index": 3, "group_index": 1, "label": "ok"}
    done = httpx.post(f"{gateway.url}/sessions/{session}/finish", json=finish, timeout=60)
    assert done.status_code == 200 and done.json()["turns"] == 1
    assert httpx.post(f"{gateway.url}/sessions/{session}/finish", json=finish, timeout=60).status_code == 409
    with pytest.raises(openai.ConflictError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])
    bad = httpx.post(f"{gateway.url}/sessions/other-{session}/finish", json={"reward": "high"}, timeout=60)
    assert bad.status_code == 400 and "reward" in bad.json()["error"]["message"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if list(gateway.logs.glob("*.parquet")):
            sessions = read_log(gateway.logs).read_sessions().infos
            if session in sessions:
                info = sessions[session]
                assert (info.reward, info.index, info.group_index, info.label) == (0.75, 3, 1, "ok")
                return
        time.sleep(0.1)
    raise AssertionError("the sessions row never reached the log")


def test_responses_is_stateless(gateway: Gateway) -> None:
    client = oai(gateway.url + "/v1", "stateless")
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model="m", input="hi", previous_response_id="resp_1", store=False)
    with pytest.raises(openai.BadRequestError, match="store"):
        client.responses.create(model="m", input="hi", store=True)
    assert httpx.get(f"{gateway.url}/sessions/stateless", timeout=60).status_code == 404


def test_a_cut_output_and_an_unreadable_call(gateway: Gateway, standin: StandIn) -> None:
    api = gateway.api  # type: ignore[attr-defined]
    client = ant(gateway.url, auth_token=f"cut-{api}")
    cut = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "go"}])
    assert cut.stop_reason == "max_tokens"
    responses = oai(gateway.url + "/v1", f"cut-{api}")
    incomplete = responses.responses.create(model="m", input="go", max_output_tokens=5, store=False)
    assert incomplete.status == "incomplete"
    first = len(standin.ledger)
    broken = client.messages.create(model="m", max_tokens=512, messages=[{"role": "user", "content": "[broken]"}])
    turns = session_turns(gateway.logs, f"cut-{api}", 3)
    assert [t.finish_reason for t in turns[:2]] == ["length", "length"]
    assert all(len(t.output_ids) == 5 for t in turns[:2])
    if api == "generate":
        # The parser could not read the call: answered as text, recorded ill-formed.
        assert [b.type for b in broken.content] == ["text"] and "<tool_call>" in broken.content[0].text  # type: ignore[union-attr]
        assert turns[2].ill_formed
    assert_turns_are_the_ledger_in_order(turns[2:], standin.ledger[first:], api)


def test_models_and_health(gateway: Gateway) -> None:
    assert httpx.get(gateway.url + "/healthz", timeout=60).json() == {"status": "ok"}
    listed = oai(gateway.url + "/v1", "k").models.list()
    # The tokenizer folder's name, never its filesystem path.
    assert [m.id for m in listed.data] == ["qwen3"]
    assert [m.id for m in ant(gateway.url, api_key="k").models.list().data] == ["qwen3"]
