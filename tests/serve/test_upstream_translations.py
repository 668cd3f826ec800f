"""The upstreams' translations with plain dicts, no server: a request into the body sent, an answer into a turn.

``serve/upstreams/chat.py`` and ``generate.py`` hold no I/O: what they send and what they make of an
answer is checked here in-process; the transport and the gateway around them are the subprocess and
in-process gateway tests' (tests/serve/test_serve_faults.py, tests/serve/test_serve_guard.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from tests.support.helpers import needs

needs("starlette", "serve", module_level=True)

from tito_cli.capture.recorded_turn import RecordedTurn  # noqa: E402
from tito_cli.capture.records import PromptMessages  # noqa: E402
from tito_cli.serve.exchange import ChatRequest, ClientError, UpstreamError  # noqa: E402
from tito_cli.serve.upstreams.answers import check_answer  # noqa: E402
from tito_cli.serve.upstreams.chat import ChatAnswer, chat_call, chat_generation, read_chat_answer  # noqa: E402
from tito_cli.serve.upstreams.generate import (  # noqa: E402
    generate_payload,
    generate_sampling,
    read_generate_answer,
)

MESSAGES: list[dict[str, Any]] = [
    {"role": "system", "content": "You are terse. «Ünïcode» stays as it is."},
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "ls", "arguments": {"path": "."}}}],
    },
    {"role": "tool", "tool_call_id": "t1", "content": "a.py\nb.py"},
]
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object", "properties": {}}}}]


def request(**fields: Any) -> ChatRequest:
    return ChatRequest(messages=[dict(m) for m in MESSAGES], tools=TOOLS, **fields)


def answer(prompt: int = 40, output: int = 5) -> dict[str, Any]:
    """A vLLM chat answer with token ids, as the upstream sends it."""
    outputs = [100 + i for i in range(output)]
    return {
        "id": "chatcmpl-1",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning_content": "Look first.",
                    "tool_calls": [
                        {"id": "x", "type": "function", "function": {"name": "ls", "arguments": '{"path":"src"}'}}
                    ],
                },
                "logprobs": {
                    "content": [{"token": "t", "logprob": -0.5 * i, "top_logprobs": []} for i in range(output)]
                },
                "finish_reason": "tool_calls",
                "token_ids": outputs,
            }
        ],
        "usage": {"prompt_tokens": prompt, "completion_tokens": output},
        "prompt_token_ids": list(range(7, 7 + prompt)),
        "metadata": {"weight_version": 3},
    }


def ids() -> Callable[[], str]:
    counter = iter(range(1000))
    return lambda: f"call_{next(counter)}"


def test_the_chat_body_carries_the_conversation_and_what_the_client_asked() -> None:
    call = chat_call(request(max_tokens=64, temperature=0.5, stop=["END"]), "qwen", {"enable_thinking": False}, 32)
    body = json.loads(call.payload)
    # Tool-call arguments go as canonical JSON text; everything else as the client sent it.
    sent = [dict(m) for m in MESSAGES]
    sent[2] = {
        **sent[2],
        "tool_calls": [{**sent[2]["tool_calls"][0], "function": {"name": "ls", "arguments": '{"path": "."}'}}],
    }
    assert body == {
        "messages": sent,
        "model": "qwen",
        "stream": False,
        "logprobs": True,
        "return_token_ids": True,
        "tools": TOOLS,
        "chat_template_kwargs": {"enable_thinking": False},
        "max_tokens": 32,
        "temperature": 0.5,
        "stop": ["END"],
    }
    assert call.sampling == {"max_tokens": 32, "temperature": 0.5, "stop": ["END"]}
    # Serialized once: the body's messages are the texts the log's cell and the delta are made of.
    assert call.messages.texts == [json.dumps(m, ensure_ascii=False) for m in sent]
    assert call.messages.text() == json.dumps(sent, ensure_ascii=False)
    assert "«Ünïcode»".encode() in call.payload


def test_a_request_the_log_cannot_hold_never_goes_upstream() -> None:
    bad = ChatRequest(messages=[{"role": "user", "content": "a\ud800b"}])
    with pytest.raises(ClientError, match="cannot be recorded"):
        chat_call(bad, "m", {}, None)


def test_a_chat_answer_becomes_the_turn_with_compact_ids() -> None:
    call = chat_call(request(), "m", {}, None)
    generation = chat_generation(call, read_chat_answer(json.dumps(answer()).encode()), 1000, ids())
    assert isinstance(generation.prompt_ids, np.ndarray) and generation.prompt_ids.dtype == np.int32
    assert generation.prompt_ids.tolist() == list(range(7, 47))
    assert generation.output_ids == [100, 101, 102, 103, 104]
    assert generation.logprobs == [-0.0, -0.5, -1.0, -1.5, -2.0]
    assert generation.finish_reason == "tool_calls" and generation.stop == "tool_calls"
    assert generation.reasoning == "Look first." and generation.content == ""
    assert [(c.id, c.name, c.arguments) for c in generation.tool_calls] == [("call_0", "ls", '{"path": "src"}')]
    assert generation.response_message == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "Look first.",
        "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": "ls", "arguments": '{"path": "src"}'}}
        ],
    }
    assert generation.upstream_id == "chatcmpl-1" and generation.weight_versions == "3"
    assert generation.prompt_messages is call.messages


def generic(content: bytes) -> ChatAnswer:
    """The answer as the slow path reads it (what the typed fast path must agree with)."""
    data = json.loads(content)
    choice = data["choices"][0]
    logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    return ChatAnswer(data["prompt_token_ids"], choice["token_ids"], logprobs, choice["message"],
                      choice.get("finish_reason"), data.get("usage"), data.get("id"), data.get("metadata"),
                      checked=False)  # fmt: skip


def test_the_typed_read_and_the_json_read_make_the_same_turn_and_row() -> None:
    content = json.dumps(answer(prompt=300, output=40)).encode()
    call = chat_call(request(), "m", {}, None)
    fast = chat_generation(call, read_chat_answer(content), 1000, ids())
    slow = chat_generation(call, generic(content), 1000, ids())
    assert read_chat_answer(content).checked
    rows = []
    for generation in (fast, slow):
        turn = RecordedTurn("s", generation.prompt_ids, generation.output_ids, generation.logprobs,
                            generation.finish_reason, generation.prompt_messages, generation.response_message,
                            generation.tools)  # fmt: skip
        rows.append(turn.check().row)
    # The plain-list form a harness would give: the log's cells are the same bytes.
    plain = RecordedTurn("s", list(range(7, 307)), slow.output_ids, slow.logprobs, slow.finish_reason,
                         call.messages.values, slow.response_message, slow.tools).check().row  # fmt: skip
    for row in (*rows, plain):
        assert row["prompt_ids"].dtype == np.int32 and row["prompt_ids"].tobytes() == rows[0]["prompt_ids"].tobytes()
        assert row["output_logprobs"].tobytes() == rows[0]["output_logprobs"].tobytes()
        for cell in ("prompt_messages", "response_message", "tools", "finish_reason"):
            assert row[cell] == rows[0][cell], cell


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(data: dict[str, Any]) -> None:
        target = data
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


FAULTS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "boolean prompt id": (_set(("prompt_token_ids", 0), True), "token id true at prompt position 0"),
    "negative output id": (_set(("choices", 0, "token_ids", 2), -1), "token id -1 at output position 2"),
    "float prompt id": (_set(("prompt_token_ids", 3), 3.0), "token id 3.0 at prompt position 3"),
    "id beyond the vocabulary": (_set(("prompt_token_ids", 5), 5000), "beyond the tokenizer's 1000 ids"),
    "output id beyond the vocabulary": (_set(("choices", 0, "token_ids", 0), 1000), "at output position 0"),
    "id beyond int32": (_set(("prompt_token_ids", 1), 1 << 40), "at prompt position 1"),
    "positive logprob": (_set(("choices", 0, "logprobs", "content", 1, "logprob"), 0.5), "logprob 0.5 at output"),
    "NaN logprob": (_set(("choices", 0, "logprobs", "content", 1, "logprob"), math.nan), "logprob nan at output"),
    "string logprob": (_set(("choices", 0, "logprobs", "content", 0, "logprob"), "-1"), 'logprob "-1" at output'),
    "fewer logprobs": (lambda a: a["choices"][0]["logprobs"]["content"].pop(), "5 output token ids but 4 logprobs"),
    "no prompt ids": (lambda a: a.pop("prompt_token_ids"), "lacks prompt_token_ids"),
    "empty prompt ids": (_set(("prompt_token_ids",), []), "returned no prompt ids"),
    "message is a string": (_set(("choices", 0, "message"), "hi"), "choices[0].message is a string"),
    "usage disagrees": (_set(("usage", "completion_tokens"), 4), "5 token ids for 4 completion tokens"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_impossible_chat_answers_are_upstream_errors_naming_what_is_wrong(fault: str) -> None:
    change, expected = FAULTS[fault]
    data = answer()
    change(data)
    with pytest.raises(UpstreamError) as raised:
        chat_generation(chat_call(request(), "m", {}, None), read_chat_answer(json.dumps(data).encode()), 1000, ids())
    assert expected in raised.value.message
    assert raised.value.status == 502


def test_more_output_than_max_tokens_is_refused() -> None:
    call = chat_call(request(), "m", {}, 4)  # the limit the upstream is sent (the capped max_tokens)
    with pytest.raises(UpstreamError, match="5 output token ids for max_tokens 4"):
        chat_generation(call, read_chat_answer(json.dumps(answer()).encode()), None, ids())


def test_check_answer_takes_compact_arrays() -> None:
    good = np.array([1, 2, 3], dtype=np.int32)
    check_answer(good, [4], [-0.1], "x", 10)
    with pytest.raises(UpstreamError, match="token id 12 at prompt position 1: beyond the tokenizer's 10 ids"):
        check_answer(np.array([1, 12], dtype=np.int32), [4], [-0.1], "x", 10)


# -- generate --------------------------------------------------------------------------------------


def test_the_generate_body_is_the_same_with_the_ids_text_kept_or_not() -> None:
    sampling = generate_sampling(request(max_tokens=9, top_k=5, stop=["x"]), 9)
    assert sampling == {"max_new_tokens": 9, "skip_special_tokens": False, "spaces_between_special_tokens": False,
                        "no_stop_trim": True, "top_k": 5, "stop": ["x"]}  # fmt: skip
    prompt = [5, 6, 7]
    kept = generate_payload(prompt, "[5,6,7]", sampling, True, 2)
    made = generate_payload(prompt, None, sampling, True, 2)
    assert (
        json.loads(kept)
        == json.loads(made)
        == {
            "input_ids": [5, 6, 7],
            "sampling_params": sampling,
            "return_logprob": True,
            "logprob_start_len": -1,
            "stream": False,
            "return_routed_experts": True,
            "routed_experts_start_len": 2,
        }
    )
    assert "return_routed_experts" not in json.loads(generate_payload(prompt, None, sampling, False, 0))


def generate_answer(pairs: list[list[Any]], **meta: Any) -> dict[str, Any]:
    return {"text": "ignored", "meta_info": {"id": "g1", "finish_reason": {"type": "length"},
                                             "output_token_logprobs": pairs, **meta}}  # fmt: skip


def test_a_generate_answer_gives_its_output_ids_logprobs_and_finish() -> None:
    sampling = generate_sampling(request(), 8)
    meta, output, logprobs, finish = read_generate_answer(
        generate_answer([[-0.25, 11, None], [-1.0, 12, None]]), [1, 2], sampling, 100
    )
    assert (output, logprobs, finish, meta["id"]) == ([11, 12], [-0.25, -1.0], "length", "g1")


@pytest.mark.parametrize(
    ("answer_value", "expected"),
    [
        ({"no": "meta"}, "has no meta_info"),
        (generate_answer([[-0.1]]), "no meta_info.output_token_logprobs"),
        (generate_answer([[-0.1, 3, None]] * 9), "9 output token ids for max_new_tokens 8"),
        (generate_answer([[-0.1, 300, None]]), "beyond the tokenizer's 100 ids"),
        (
            generate_answer([[-0.1, 3, None]], finish_reason={"type": "abort", "message": "oom"}),
            "aborted the generation: oom",
        ),
    ],
)
def test_impossible_generate_answers_are_upstream_errors(answer_value: Any, expected: str) -> None:
    with pytest.raises(UpstreamError) as raised:
        read_generate_answer(answer_value, [1, 2], generate_sampling(request(), 8), 100)
    assert expected in raised.value.message


def test_prompt_messages_given_serialized_record_as_the_plain_list() -> None:
    texts = PromptMessages.of(MESSAGES)
    assert texts.text() == json.dumps(MESSAGES, ensure_ascii=False)
