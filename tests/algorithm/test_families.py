"""Model-family profiles: recognised from the tokenizer or its hub name, outputs parsed as servers parse them."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.support.family_logs import TOKENIZERS, tokenizer_folder
from tests.support.helpers import REPO
from tito_cli.families import (
    FAMILIES,
    REASONING_DROPPED,
    TOOL_ARGS_RERENDERED,
    WHITESPACE_TRIMMED,
    ToolCall,
    family_for,
    family_named,
    shipped_template,
)
from tito_cli.tokenizer import load

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


# -- the families beyond Qwen3 ----------------------------------------------------------------

TEMPLATES = REPO / "fixtures" / "templates"
SHIPPED_TEMPLATES = REPO / "tito_cli" / "_data" / "templates"


def test_templates_are_the_published_files_named_in_the_notice() -> None:
    notice = (TEMPLATES / "NOTICE").read_text(encoding="utf-8")
    files = sorted(p.name for p in TEMPLATES.glob("*.jinja"))
    assert files == ["deepseek-v3.1.jinja", "glm-4.6.jinja", "gpt-oss.jinja", "kimi-k2-thinking.jinja"]
    for name in files:
        data = (TEMPLATES / name).read_bytes()
        row = next(line for line in notice.splitlines() if line.startswith(f"| {name} |"))
        assert hashlib.sha256(data).hexdigest() in row and f"{len(data):,}" in row, name
    # The package ships the two the simulator renders with, byte for byte, with the notice.
    for name in ("deepseek-v3.1.jinja", "gpt-oss.jinja", "NOTICE"):
        assert (SHIPPED_TEMPLATES / name).read_bytes() == (TEMPLATES / name).read_bytes(), name
    for family in ("deepseek-v3", "gpt-oss"):
        profile = family_named(family)
        assert profile.template is not None and shipped_template(profile) == (TEMPLATES / profile.template).read_text(
            encoding="utf-8"
        )


@pytest.mark.slow
@pytest.mark.parametrize("family", ["deepseek-v3", "gpt-oss", "llama3"])
def test_a_family_is_recognised_from_its_vocabulary_or_its_hub_name(family: str) -> None:
    tokenizer = load(tokenizer_folder(family))
    found = family_for("/srv/models/checkpoint-1200", tokenizer)
    assert found is not None and found.name == family
    by_name = family_for(TOKENIZERS[family].hub_name)
    assert by_name is not None and by_name.name == family
    # Qwen3's vocabulary is not taken for another family's, nor theirs for Qwen3's.
    qwen3 = family_for(None, load(QWEN3))
    assert qwen3 is not None and qwen3.name == "qwen3"


def test_deepseek_output_with_reasoning_and_two_calls() -> None:
    text = (
        "look first</think>Let me check.<｜tool▁calls▁begin｜>"
        '<｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"cmd": "ls"}<｜tool▁call▁end｜>'
        '<｜tool▁call▁begin｜>read<｜tool▁sep｜>{"path": "a.py"}<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜><｜end▁of▁sentence｜>"
    )
    parsed = family_named("deepseek-v3").parse_output(text)
    assert (parsed.reasoning, parsed.content) == ("look first", "Let me check.")
    assert parsed.tool_calls == (ToolCall("bash", {"cmd": "ls"}), ToolCall("read", {"path": "a.py"}))
    assert not parsed.ill_formed
    # V3's own call form: the name after the separator, the arguments in a json fence.
    v3 = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>bash"
        '\n```json\n{"cmd": "ls"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    assert family_named("deepseek-v3").parse_output(v3).tool_calls == (ToolCall("bash", {"cmd": "ls"}),)


@pytest.mark.parametrize(
    "text",
    [
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"cmd": "ls"}',  # cut
        '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"cmd": <｜tool▁call▁end｜><｜tool▁calls▁end｜>',
    ],
)
def test_a_deepseek_call_that_does_not_read_stays_as_text(text: str) -> None:
    parsed = family_named("deepseek-v3").parse_output(text)
    assert parsed.ill_formed and parsed.tool_calls == () and parsed.content == text


def test_harmony_channels_are_reasoning_calls_and_the_final_answer() -> None:
    gpt_oss = family_named("gpt-oss")
    call = (
        "<|channel|>analysis<|message|>Need the file list.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>{"cmd":"ls"}<|call|>'
    )
    parsed = gpt_oss.parse_output(call)
    assert (parsed.reasoning, parsed.content, parsed.tool_calls) == (
        "Need the file list.",
        "",
        (ToolCall("bash", {"cmd": "ls"}),),
    )
    final = gpt_oss.parse_output(
        "<|channel|>analysis<|message|>Done.<|end|><|start|>assistant<|channel|>final<|message|>All fixed.<|return|>"
    )
    assert (final.reasoning, final.content, final.tool_calls, final.ill_formed) == ("Done.", "All fixed.", (), False)
    cut = gpt_oss.parse_output('<|channel|>commentary to=functions.write_file <|constrain|>json<|message|>{"path": "a')
    assert cut.ill_formed and cut.tool_calls == () and "write_file" in cut.content


def test_llama3_calls_are_json_lines_after_the_content() -> None:
    llama3 = family_named("llama3")
    text = 'Let me look.\n{"name": "bash", "parameters": {"cmd": "ls"}}\n{"name": "read", "parameters": {}}<|eot_id|>'
    parsed = llama3.parse_output(text)
    assert parsed.content == "Let me look." and not parsed.ill_formed
    assert parsed.tool_calls == (ToolCall("bash", {"cmd": "ls"}), ToolCall("read", {}))
    tagged = llama3.parse_output('<|python_tag|>{"name": "bash", "parameters": {"cmd": "ls"}}<|eom_id|>')
    assert tagged.tool_calls == (ToolCall("bash", {"cmd": "ls"}),) and tagged.content == ""
    cut = llama3.parse_output('Let me look.\n{"name": "bash", "parameters": {"cmd": ')
    assert cut.ill_formed and cut.tool_calls == () and cut.content.startswith("Let me look.")
    # The template has no tool syntax: the call goes back as the JSON line, re-serialized.
    message = parsed.message(iter(["c1", "c2"]).__next__)
    [shown] = llama3.server_messages([message])
    assert shown == {"role": "assistant", "content": text.removesuffix("<|eot_id|>")}


@pytest.mark.parametrize("family", ["qwen3", "deepseek-v3", "gpt-oss", "llama3"])
def test_what_the_model_writes_parses_back_to_what_it_meant(family: str) -> None:
    profile = family_named(family)
    calls = [("edit_file", {"path": "a.py", "old_string": "x = 1", "new_string": "x = 2"})]
    prompt = "<｜Assistant｜><think>" if family == "deepseek-v3" else ""
    for loose in (frozenset(), frozenset({0})):
        parsed = profile.parse_output(profile.write_output("Check a.py first.", "Fixing it.", calls, loose, prompt))
        assert parsed.tool_calls == (ToolCall(*calls[0]),) and not parsed.ill_formed
        if family != "llama3":  # (Llama 3 writes no reasoning)
            assert parsed.reasoning is not None and "Check a.py first." in parsed.reasoning
    answer = profile.parse_output(profile.write_output(None, "All done.", [], frozenset(), prompt))
    assert answer.content == "All done." and answer.tool_calls == ()


HARMONY_CALL = "<|start|>assistant<|channel|>commentary to=functions.bash <|constrain|>json<|message|>"


@pytest.mark.parametrize(
    ("family", "held", "prompt", "change"),
    [
        # DeepSeek-V3.1 renders history after a user message as "</think>" and the content.
        (
            "deepseek-v3",
            "<｜Assistant｜><think>plan it</think>Done.<｜end▁of▁sentence｜>",
            "<｜Assistant｜></think>Done.<｜end▁of▁sentence｜><｜User｜>",
            REASONING_DROPPED,
        ),
        (
            "deepseek-v3",
            '<｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"cmd":"ls"}<｜tool▁call▁end｜>',
            '<｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"cmd": "ls"}<｜tool▁call▁end｜>',
            TOOL_ARGS_RERENDERED,
        ),
        (
            "deepseek-v3",
            '<｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"cmd":"ls"}<｜tool▁call▁end｜>',
            '<｜tool▁call▁begin｜>bash<｜tool▁sep｜>{"cmd": "rm"}<｜tool▁call▁end｜>',
            None,
        ),
        # Harmony: a call's header written the template's way, an analysis dropped once a final answer followed.
        (
            "gpt-oss",
            HARMONY_CALL + '{"cmd":"ls"}<|call|>',
            '<|start|>assistant to=functions.bash<|channel|>commentary json<|message|>{"cmd": "ls"}<|call|>',
            TOOL_ARGS_RERENDERED,
        ),
        (
            "gpt-oss",
            HARMONY_CALL + '{"cmd":"ls"}<|call|>',
            '<|start|>assistant to=functions.bash<|channel|>commentary json<|message|>{"cmd": "pwd"}<|call|>',
            None,
        ),
        (
            "gpt-oss",
            "<|start|>assistant<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>ok<|return|>",
            "<|start|>assistant<|channel|>final<|message|>ok<|end|>",
            REASONING_DROPPED,
        ),
        # Llama 3's JSON call re-serialized by the harness; its template trimming the content.
        (
            "llama3",
            'Look.\n{"name": "bash", "parameters": {"cmd":"ls"}}<|eot_id|>',
            'Look.\n{"name": "bash", "parameters": {"cmd": "ls"}}<|eot_id|>',
            TOOL_ARGS_RERENDERED,
        ),
        ("llama3", "\n\nAll done.\n<|eot_id|>", "\n\nAll done.<|eot_id|>", WHITESPACE_TRIMMED),
        # Content trimmed by a client or a template, whatever the family.
        ("qwen3", "Let me look.\n\n<tool_call>\n{}", "Let me look.\n<tool_call>\n{}", WHITESPACE_TRIMMED),
        ("gpt-oss", "<|message|>  All fixed. <|end|>", "<|message|>All fixed.<|end|>", WHITESPACE_TRIMMED),
        ("qwen3", "<|im_start|>system\nYou are a coding agent.", "<|im_start|>system\nYou are a reviewer.", None),
    ],
)
def test_what_a_replay_changed_is_told_with_the_familys_markers(
    family: str, held: str, prompt: str, change: str | None
) -> None:
    parted = next(i for i, (a, b) in enumerate(zip(held, prompt, strict=False)) if a != b)
    assert family_named(family).drift_change(held, prompt, parted) == change


# -- template-only families: their published templates, rendered -------------------------------

RUN_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}, "n": {"type": "integer"}}},
        },
    }
]


def render(template: str, messages: list[dict[str, Any]], generation: bool = True) -> str:
    """``messages`` through a published template, in Jinja's sandbox with transformers' settings.

    (Not through transformers itself: the Kimi-K2-Thinking template appends to a list, which
    transformers' immutable sandbox refuses; jinja2's sandbox, as servers run templates, allows it.)
    """
    import jinja2.sandbox

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    env = jinja2.sandbox.SandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, tools=RUN_TOOL, add_generation_prompt=generation)


def call_reply(reasoning: str, call_id: str = "functions.run:0") -> dict[str, Any]:
    call = {"id": call_id, "type": "function", "function": {"name": "run", "arguments": {"cmd": "ls", "n": 2}}}
    return {"role": "assistant", "content": "Running it.", "reasoning_content": reasoning, "tool_calls": [call]}


def replayed(
    template: str, before: list[dict[str, Any]], reply: dict[str, Any], after: list[dict[str, Any]]
) -> tuple[str, str]:
    """What a turn held (its prompt, and the reply as the template writes it) and the next prompt."""
    prompt = render(template, before)
    whole = render(template, [*before, reply], generation=False)
    assert whole.startswith(prompt)
    return prompt + whole[len(prompt) :], render(template, [*before, reply, *after])


def parted_at(held: str, prompt: str) -> int:
    return next(i for i, (a, b) in enumerate(zip(held, prompt, strict=False)) if a != b)


START = [{"role": "system", "content": "You are a coding agent."}, {"role": "user", "content": "Fix it."}]


def test_glm_46_drops_reasoning_at_the_next_user_message_and_its_parser_reads_the_template_s_calls() -> None:
    glm = family_named("glm45")
    assert getattr(family_for("zai-org/GLM-4.6"), "name", None) == "glm45"
    template = (TEMPLATES / "glm-4.6.jinja").read_text(encoding="utf-8")
    held, prompt = replayed(
        template,
        START,
        call_reply("Look first."),
        [{"role": "tool", "content": "a.py"}, {"role": "user", "content": "Why?"}],
    )
    output = held[len(render(template, START)) :]
    parsed = glm.parse_output(output)
    assert (parsed.reasoning, parsed.content, parsed.tool_calls) == (
        "Look first.",
        "Running it.",
        (ToolCall("run", {"cmd": "ls", "n": 2}),),
    )
    assert "<think>Look first.</think>" in held and "<think>Look first.</think>" not in prompt
    assert glm.drift_change(held, prompt, parted_at(held, prompt)) == REASONING_DROPPED


def test_kimi_k2_thinking_renders_the_clients_call_ids_and_drops_reasoning_after_a_final_answer() -> None:
    kimi = family_named("kimi-k2")
    assert getattr(family_for("moonshotai/Kimi-K2-Thinking"), "name", None) == "kimi-k2"
    template = (TEMPLATES / "kimi-k2-thinking.jinja").read_text(encoding="utf-8")
    tool = {"role": "tool", "tool_call_id": "functions.run:0", "content": "a.py"}
    # The client kept another id than the model wrote: the call is written back under it.
    written = call_reply("Look first.")
    kept = call_reply("Look first.", call_id="call_7f3a")
    held = (
        render(template, START) + render(template, [*START, written], generation=False)[len(render(template, START)) :]
    )
    prompt = render(template, [*START, kept, tool])
    assert "<|tool_call_begin|>call_7f3a<|tool_call_argument_begin|>" in prompt
    assert kimi.drift_change(held, prompt, parted_at(held, prompt)) == TOOL_ARGS_RERENDERED
    parsed = kimi.parse_output(held[len(render(template, START)) :])
    assert parsed.tool_calls == (ToolCall("run", {"cmd": "ls", "n": 2}),) and parsed.reasoning == "Look first."
    # Reasoning stays through the tool loop, and goes once an answer without calls is followed by more.
    answer = {"role": "assistant", "content": "All good.", "reasoning_content": "Done."}
    before = [*START, written, tool]
    held = render(template, before) + "<think>Done.</think>All good.<|im_end|>"  # as the model writes it
    prompt = render(template, [*before, answer, {"role": "user", "content": "Thanks."}])
    assert "<think>Look first.</think>" in held and "<think>Look first.</think>" not in prompt
    assert kimi.drift_change(held, prompt, parted_at(held, prompt)) == REASONING_DROPPED
