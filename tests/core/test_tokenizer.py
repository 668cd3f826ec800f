"""The fixture tokenizer: loads offline, round-trips text, renders its chat template, rebuilds exactly."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.helpers import REPO

TOKENIZER = REPO / "fixtures" / "tokenizer"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
]

CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the failing test."},
    {
        "role": "assistant",
        "content": "Let me look around.",
        "reasoning_content": "FIRST-THOUGHT",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
            {"id": "c2", "type": "function", "function": {"name": "read_file", "arguments": {"path": "a.py"}}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    {"role": "tool", "tool_call_id": "c2", "content": "print(1)"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "SECOND-THOUGHT",
        "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "bash", "arguments": '{"command": "pytest"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c3", "content": "1 passed"},
]


@pytest.fixture(scope="module")
def tokenizer(offline: None) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(TOKENIZER))


def render(tokenizer: Any, messages: list[dict[str, Any]], **kwargs: Any) -> str:
    text = tokenizer.apply_chat_template(messages, tokenize=False, **kwargs)
    assert isinstance(text, str)
    return text


def test_loads_offline_as_a_fast_tokenizer(tokenizer: Any) -> None:
    config = json.loads((TOKENIZER / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert tokenizer.is_fast
    assert 2000 < len(tokenizer) <= 8192
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<|endoftext|>"


@pytest.mark.parametrize(
    "token", ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>"]
)
def test_markers_are_single_tokens(tokenizer: Any, token: str) -> None:
    ids = tokenizer.encode(f"x{token}y", add_special_tokens=False)
    assert tokenizer.convert_tokens_to_ids(token) in ids
    assert len(ids) == 3


def test_special_tokens_are_skipped_when_asked_but_markers_stay(tokenizer: Any) -> None:
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|><think>", add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == "user\nhi<think>"


def test_agent_text_compresses(tokenizer: Any) -> None:
    text = 'def compute_total(values):\n    """Sum the values."""\n    return sum(values)\n'
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) < len(text) / 2.5


@settings(max_examples=60, deadline=None)
@given(text=st.text(max_size=200))
def test_round_trips_any_text(tokenizer: Any, text: str) -> None:
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False) == text


def test_template_renders_tools_into_the_system_turn(tokenizer: Any) -> None:
    with_tools = render(tokenizer, CONVERSATION[:2], tools=TOOLS, add_generation_prompt=True)
    without = render(tokenizer, CONVERSATION[:2], add_generation_prompt=True)
    assert without == (
        "<|im_start|>system\nYou are a coding agent.<|im_end|>\n"
        "<|im_start|>user\nFix the failing test.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    system = with_tools.split("<|im_end|>")[0]
    assert system.startswith("<|im_start|>system\nYou are a coding agent.\n\n# Tools")
    for tool in TOOLS:
        assert "\n" + json.dumps(tool) + "\n" in system
    assert with_tools.endswith(without.split("<|im_end|>\n", 1)[1])


def test_template_renders_calls_results_and_only_the_latest_reasoning(tokenizer: Any) -> None:
    text = render(tokenizer, CONVERSATION, tools=TOOLS, add_generation_prompt=True)
    assert "FIRST-THOUGHT" not in text
    assert "<think>\nSECOND-THOUGHT\n</think>\n\n<tool_call>" in text
    # Arguments given as a string are copied, objects go through tojson; both look the same.
    assert (
        "<|im_start|>assistant\nLet me look around.\n"
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call><|im_end|>\n'
    ) in text
    # Consecutive tool results share one user turn.
    assert (
        "<|im_start|>user\n<tool_response>\na.py\n</tool_response>\n"
        "<tool_response>\nprint(1)\n</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\n")
    # Before the next assistant message, the first reasoning is the latest and is kept.
    assert "<think>\nFIRST-THOUGHT\n</think>\n\nLet me look around." in render(tokenizer, CONVERSATION[:5])


def test_tokenized_template_matches_encoded_text(tokenizer: Any) -> None:
    text = render(tokenizer, CONVERSATION, tools=TOOLS, add_generation_prompt=True)
    ids = tokenizer.apply_chat_template(CONVERSATION, tools=TOOLS, add_generation_prompt=True, return_dict=False)
    assert list(ids) == tokenizer.encode(text, add_special_tokens=False)
    assert tokenizer.decode(ids) == text


def test_build_script_reproduces_the_files(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("build_tokenizer", TOKENIZER / "build.py")
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    written = build.write(tmp_path)
    assert {p.name for p in written} == {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    for path in written:
        assert path.read_bytes() == (TOKENIZER / path.name).read_bytes(), (
            f"{path.name} differs from fixtures/tokenizer: run `python fixtures/tokenizer/build.py` "
            "(then re-simulate fixtures/logs) if the change is intended"
        )
