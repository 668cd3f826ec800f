"""Model-family profiles: recognised from the tokenizer or its hub name, outputs parsed as servers parse them."""

from __future__ import annotations

import pytest

from tito_cli.families import FAMILIES, ToolCall, family_for, family_named
from tito_cli.tokenizer import load

from .helpers import REPO

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"


def test_qwen3_is_recognised_from_its_vocabulary_whatever_the_log_calls_it() -> None:
    tokenizer = load(QWEN3)
    profile = family_for("/models/my-finetune", tokenizer)
    assert profile is not None and profile.name == "qwen3"
    by_name = family_for("Qwen/Qwen3-8B")
    assert by_name is not None and by_name.name == "qwen3"
    assert family_for("acme/unknown-model") is None


def test_qwen3_output_with_reasoning_and_two_tool_calls() -> None:
    text = (
        "<think>\nlook first\n</think>\n\nLet me check.\n"
        '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call><|im_end|>'
    )
    parsed = family_named("qwen3").parse_output(text)
    assert parsed.reasoning == "look first"
    assert parsed.content == "Let me check."
    assert parsed.tool_calls == (ToolCall("bash", {"cmd": "ls"}), ToolCall("read", {"path": "a.py"}))
    assert not parsed.ill_formed
    message = parsed.message(iter(["c1", "c2"]).__next__)
    assert [c["id"] for c in message["tool_calls"]] == ["c1", "c2"]
    assert message["tool_calls"][0]["function"]["arguments"] == '{"cmd": "ls"}'


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "bash", "arguments": {"cmd": \n</tool_call>',  # JSON that does not parse
        '<tool_call>\n{"name": "bash", "arguments": {"cmd": "ls"}}',  # cut before the block closed
        "<think>\nthinking until the length limit",  # reasoning never closed
    ],
)
def test_an_output_the_parser_cannot_read_is_ill_formed_and_kept_as_text(text: str) -> None:
    parsed = family_named("qwen3").parse_output(text)
    assert parsed.ill_formed
    assert parsed.tool_calls == ()
    assert (parsed.reasoning or "") + parsed.content in text


def test_plain_text_is_content() -> None:
    parsed = family_named("qwen3").parse_output("All done.<|im_end|>")
    assert (parsed.content, parsed.reasoning, parsed.tool_calls, parsed.ill_formed) == ("All done.", None, (), False)
    assert "qwen3" in FAMILIES
