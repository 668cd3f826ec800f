"""The stand-in follows the wires the gateway reads, streamed and not (it is the tests' only stand-in)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.serve_helpers import need_extras
from tests.support.serve_standin import StandIn, qwen3_output

need_extras("httpx")

import httpx  # noqa: E402

REPLY = qwen3_output("Done.", "Think first.", [("run", {"cmd": "ls"})])


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(lambda conversation: REPLY) as server:
        yield server


def events(response: httpx.Response) -> list[Any]:
    data = [line[len("data: ") :] for line in response.text.split("\n") if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


def test_generate_answers_sglang_shapes_streamed_or_not(standin: StandIn) -> None:
    prompt = standin.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    body = {"input_ids": prompt, "sampling_params": {"max_new_tokens": 100, "skip_special_tokens": False}}
    whole = httpx.post(standin.url + "/generate", json={**body, "return_logprob": True}, timeout=60).json()
    entry = standin.ledger[-1]
    assert entry["prompt_ids"] == prompt and whole["output_ids"] == entry["output_ids"]
    meta = whole["meta_info"]
    assert meta["finish_reason"] == {"type": "stop", "matched": standin.end}
    assert [p[1] for p in meta["output_token_logprobs"]] == entry["output_ids"]
    assert [p[0] for p in meta["output_token_logprobs"]] == entry["logprobs"]
    assert whole["text"] == REPLY + "<|im_end|>"
    assert (meta["prompt_tokens"], meta["completion_tokens"]) == (len(prompt), len(entry["output_ids"]))
    chunks = events(httpx.post(
        standin.url + "/generate", json={**body, "return_logprob": True, "stream": True}, timeout=60
    ))
    assert chunks[-1]["text"] == whole["text"] and chunks[-1]["output_ids"] == whole["output_ids"]
    assert chunks[-1]["meta_info"]["finish_reason"] == meta["finish_reason"]
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    cut = httpx.post(
        standin.url + "/generate", json={**body, "sampling_params": {"max_new_tokens": 3}}, timeout=60
    ).json()
    assert cut["meta_info"]["finish_reason"] == {"type": "length", "length": 3} and len(cut["output_ids"]) == 3
    assert cut["meta_info"]["cached_tokens"] == len(prompt)


def test_chat_answers_vllm_shapes_streamed_or_not(standin: StandIn) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "return_token_ids": True, "logprobs": True}
    whole = httpx.post(standin.url + "/v1/chat/completions", json=body, timeout=60).json()
    entry = standin.ledger[-1]
    choice = whole["choices"][0]
    assert whole["prompt_token_ids"] == entry["prompt_ids"] and choice["token_ids"] == entry["output_ids"]
    assert [c["logprob"] for c in choice["logprobs"]["content"]] == entry["logprobs"]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert (message["content"], message["reasoning_content"]) == ("Done.", "Think first.")
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"cmd": "ls"}
    chunks = events(httpx.post(standin.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=60))
    assert chunks[0]["prompt_token_ids"] == whole["prompt_token_ids"]
    assert [t for c in chunks[1:] for t in c["choices"][0]["token_ids"]] == choice["token_ids"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_faults(standin: StandIn) -> None:
    standin.fail_next("status", code=500)
    assert httpx.post(standin.url + "/generate", json={"input_ids": [1, 2]}, timeout=60).status_code == 500
    standin.fail_next("close")
    with pytest.raises(httpx.RemoteProtocolError):
        httpx.post(standin.url + "/generate", json={"input_ids": [1, 2]}, timeout=60)
    standin.fail_next("hang", seconds=2)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(standin.url + "/generate", json={"input_ids": [1, 2]}, timeout=0.5)
    assert httpx.post(standin.url + "/generate", json={"input_ids": [1, 2]}, timeout=60).status_code == 200
