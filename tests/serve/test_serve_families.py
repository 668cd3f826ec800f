"""tito serve --upstream-api generate for each family with a tokenizer here: one agent session through the gateway.

The stand-in upstream (tests/support/serve_standin.py) writes each reply in the family's own format (the
profile's ``write_output``: DeepSeek's call markers, harmony channels, Llama 3's JSON lines); the
gateway renders the prompt with the family's template (gpt-oss's folder has none: the one tito
ships), parses the output with the family's parser, and the OpenAI SDK agent gets the reasoning and
the tool calls back, sends the results, and gets the answer.  Every turn is checked against the
stand-in's ledger, and the log rebuilds.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.family_logs import tokenizer_folder
from tests.support.serve_helpers import need_extras
from tests.support.serve_inprocess import InProcessGateway as Gateway
from tests.support.serve_standin import StandIn
from tito_cli.families import family_named
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild

need_extras("starlette", "uvicorn", "httpx", "openai")

import openai  # noqa: E402

#: How each family's rendered prompt shows a tool result (the script counts them to know its step).
TOOL_RESULT = {
    "deepseek-v3": "<｜tool▁output▁begin｜>",
    "gpt-oss": "<|start|>functions.",
    "llama3": "<|start_header_id|>tool<|end_header_id|>",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]


def script_for(family: str) -> Any:
    profile = family_named(family)

    def reply(prompt: str) -> str:
        done = prompt.count(TOOL_RESULT[family])
        # DeepSeek's own V3 template opens no <think>: the model writes the whole block (as R1-style models do).
        think = "<think>" if family == "deepseek-v3" else ""
        reasoning = None if family == "llama3" else f"Step {done} needs a run."
        if done < 2:
            text = profile.write_output(
                reasoning, f"Running step {done}.", [("run", {"cmd": f"make s{done}"})], frozenset(), prompt
            )
        else:
            text = profile.write_output(reasoning, "Both steps passed.", [], frozenset(), prompt)
        if think and reasoning is not None and not prompt.endswith("<think>"):
            text = think + reasoning + "</think>" + text
        return text

    return reply


@pytest.fixture(scope="module", params=sorted(TOOL_RESULT))
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture()
def served(family: str, tmp_path: Path) -> Iterator[tuple[StandIn, Gateway]]:
    folder = tokenizer_folder(family)
    with (
        StandIn(script_for(family), folder, family=family) as standin,
        Gateway(standin.url, tmp_path / "logs", tokenizer=str(folder), flush_every=0.2) as gateway,
    ):
        yield standin, gateway


@pytest.mark.slow
def test_a_session_round_trips_reasoning_and_tool_calls(
    family: str, served: tuple[StandIn, Gateway], tmp_path: Path
) -> None:
    standin, gateway = served
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=f"{family}-session", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful engineer."},
        {"role": "user", "content": "Make the build pass."},
    ]
    try:
        for _ in range(5):  # bounded: two calls, then the answer
            response = client.chat.completions.create(model="m", messages=messages, tools=TOOLS, max_tokens=256)  # type: ignore[arg-type]
            message = response.choices[0].message.model_dump(exclude_none=True)
            messages.append(message)
            if not message.get("tool_calls"):
                break
            [call] = message["tool_calls"]
            assert call["function"]["name"] == "run"
            arguments = json.loads(call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"ran {arguments['cmd']}: ok"})
    finally:
        client.close()
    replies = [m for m in messages if m["role"] == "assistant"]
    assert [json.loads(m["tool_calls"][0]["function"]["arguments"]) for m in replies[:2]] == [
        {"cmd": "make s0"},
        {"cmd": "make s1"},
    ]
    assert "Both steps passed." in replies[2]["content"] and "tool_calls" not in replies[2]
    if family == "llama3":
        assert all("reasoning_content" not in m for m in replies)
    else:
        # (harmony says a call's prose in its analysis: the reasoning goes on with it)
        for i, reply in enumerate(replies):
            assert reply["reasoning_content"].startswith(f"Step {i} needs a run."), reply
    # What was recorded is what the upstream saw and generated, and it rebuilds.
    entries = standin.ledger
    assert len(entries) == 3
    assert gateway.terminate() == 0, gateway.output()  # closes the log
    log = TurnLog.open([gateway.logs])
    turns = [t for rows in log.iter_sessions() for t in parse_session(rows)]
    assert [t.prompt_ids.tolist() for t in turns] == [e["prompt_ids"] for e in entries]
    assert [t.output_ids.tolist() for t in turns] == [e["output_ids"] for e in entries]
    assert turns[0].response_message["tool_calls"][0]["function"]["name"] == "run"
    summary = rebuild([gateway.logs], tmp_path / "samples.parquet", workers=1)
    assert summary.samples_written >= 1 and not summary.rejected
