"""Canonical token history (docs/spec.md §11): continued turns extend the held ids; everything else falls back."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import Result

from tests.support.helpers import REPO, needs
from tests.support.serve_helpers import BASH_TOOLS as TOOLS

# tito_cli.serve imports the gateway's web stack: skipped without the serve extra, failed under CI.
needs("starlette", "serve", module_level=True)

from tito_cli.serve.history import (  # noqa: E402
    CANONICAL,
    HISTORY_REWRITTEN,
    NO_HELD_TURN,
    NOT_APPEND_ONLY,
    OUTPUT_NOT_ENDED,
    RENDERED,
    TOOLS_CHANGED,
    CanonicalHistory,
    Prompt,
    RenderedHistory,
    same_message,
)
from tito_cli.tokenizer import load  # noqa: E402

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"
LLAMA3 = REPO / "tests" / "npm" / "node_modules" / "@lenml" / "tokenizer-llama3_1" / "models"



class Renderer:
    """A real tokenizer and its chat template (what the gateway's generate upstream renders with)."""

    def __init__(self, path: Path, end_of_turn: tuple[str, ...], template: str | None = None) -> None:
        self.tokenizer = load(path)
        if template is not None:
            self.tokenizer.chat_template = template
        self.end_of_turn = end_of_turn

    def render(self, messages: list[dict[str, Any]], tools: Any) -> str:
        text = self.tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        assert isinstance(text, str)
        return text

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.backend_tokenizer.decode(list(ids), skip_special_tokens=False))


@pytest.fixture(scope="module")
def qwen3() -> Renderer:
    return Renderer(QWEN3, ("<|im_end|>",))


def _answer(reasoning: str | None, content: str, calls: list[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    if calls:  # as the gateway answers: arguments as JSON text (json.dumps of what the parser read)
        message["tool_calls"] = [
            {"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, (n, a) in enumerate(calls)
        ]
    return message


def _qwen3_output(reasoning: str, content: str, calls: list[tuple[str, str]] = ()) -> str:  # type: ignore[assignment]
    """A Qwen3 output as the model writes it (arguments in the model's own spelling, not tojson's)."""
    text = f"<think>\n{reasoning}\n</think>\n\n{content}"
    for name, arguments in calls:
        text += f'\n<tool_call>\n{{"name": "{name}", "arguments": {arguments}}}\n</tool_call>'
    return text + "<|im_end|>"


def _echo(answer: dict[str, Any], *, keep_reasoning: bool) -> dict[str, Any]:
    """The assistant message as a client sends it back: as answered, or without its reasoning."""
    return {k: v for k, v in answer.items() if k != "reasoning_content" or keep_reasoning}


class Played:
    """A session played through a history: each turn's prompt, the ids generated, and the log rows."""

    def __init__(self, history: CanonicalHistory | RenderedHistory, renderer: Renderer) -> None:
        self.history, self.renderer = history, renderer
        self.turns: list[tuple[Prompt, list[int], list[dict[str, Any]], dict[str, Any]]] = []

    def turn(self, sid: str, messages: list[dict[str, Any]], output: str, answer: dict[str, Any],
             tools: Any = TOOLS) -> Prompt:
        prompt = self.history.prompt(sid, messages, tools)
        output_ids = self.renderer.encode(output)
        self.history.remember(sid, prompt, messages, tools, output_ids, answer)
        self.turns.append((prompt, output_ids, messages, answer))
        return prompt


def _coding_session(play: Played, sid: str = "s1") -> list[Prompt]:
    """Reasoning, a tool call whose arguments the template re-serializes, a tool result, a new user message."""
    system = {"role": "system", "content": "You are a coding agent."}
    user = {"role": "user", "content": "Fix the failing test."}
    a1 = _answer("I should look at the files.", "Let me look.", [("bash", {"cmd": "ls"})])
    o1 = _qwen3_output("I should look at the files.", "Let me look.", [("bash", '{"cmd":"ls"}')])
    tool = {"role": "tool", "tool_call_id": "toolu_x", "content": "a.py\ntest_a.py"}
    a2 = _answer("The test imports a.py.", "Found it: a.py is fine.")
    o2 = _qwen3_output("The test imports a.py.", "Found it: a.py is fine.")
    user2 = {"role": "user", "content": "Now run the tests."}
    a3 = _answer("Run pytest.", "", [("bash", {"cmd": "pytest -q"})])
    o3 = _qwen3_output("Run pytest.", "", [("bash", '{"cmd": "pytest -q"}')])
    p1 = play.turn(sid, [system, user], o1, a1)
    p2 = play.turn(sid, [system, user, _echo(a1, keep_reasoning=True), tool], o2, a2)
    p3 = play.turn(sid, [system, user, _echo(a1, keep_reasoning=True), tool, _echo(a2, keep_reasoning=True), user2],
                   o3, a3)
    return [p1, p2, p3]


def test_continued_turns_extend_the_held_ids_with_only_the_new_text(qwen3: Renderer) -> None:
    play = Played(CanonicalHistory(qwen3, qwen3.end_of_turn), qwen3)
    p1, p2, p3 = _coding_session(play)
    assert (p1.history, p1.reason) == (RENDERED, NO_HELD_TURN)
    for (before, output, _, _), (after, _, messages, _) in zip(play.turns, play.turns[1:], strict=False):
        held = [*before.ids, *output]
        assert after.history == CANONICAL and after.reason is None
        assert list(after.ids[: len(held)]) == held and after.held == len(held)
        new_text = qwen3.decode(after.ids[len(held) :])
        assert new_text.endswith("<|im_start|>assistant\n")
        assert new_text.startswith("\n<|im_start|>user\n")
        assert messages[-1]["content"] in new_text
    # The tool result alone, and the generation prompt: nothing of the earlier history is rendered again.
    assert qwen3.decode(p2.ids[p2.held :]) == (
        "\n<|im_start|>user\n<tool_response>\na.py\ntest_a.py\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    assert p3.metadata() == {"history": "canonical"}
    # The ids' JSON text, kept with the held turns, is the ids (what the generate upstream is sent).
    assert [json.loads(p.ids_json or "") for p in (p1, p2, p3)] == [list(p1.ids), list(p2.ids), list(p3.ids)]
    assert p1.metadata() == {"history": "rendered", "history_reason": "no held turn"}


def test_render_drifts_where_canonical_continues(qwen3: Renderer) -> None:
    play = Played(RenderedHistory(qwen3), qwen3)
    _coding_session(play)
    (p1, o1, _, _), (p2, _, _, _), (p3, _, _, _) = play.turns
    # Turn 2: the template re-serializes the arguments ({"cmd":"ls"} -> {"cmd": "ls"}); turn 3: it also drops reasoning.
    assert list(p2.ids[: len(p1.ids) + len(o1)]) != [*p1.ids, *o1]
    assert "The test imports a.py." not in qwen3.decode(p3.ids)


def _rebuild_forks(tmp_path: Path, play: Played) -> tuple[int, list[list[int]]]:
    """Write the played turns as a turn log and rebuild it: (forks, each sample's trained ids)."""
    import pyarrow.parquet as pq

    from tito_cli import TurnLogWriter, rebuild

    logs = tmp_path / "logs"
    with TurnLogWriter(logs, tokenizer=str(QWEN3)) as log:
        for prompt, output, _, answer in play.turns:
            log.record_turn("s1", prompt.ids, output, [-0.5] * len(output), "stop", prompt.messages, answer, TOOLS,
                            prompt.metadata())
        log.finish_session("s1", 1.0)
    summary = rebuild([logs], tmp_path / "samples.parquet")
    table = pq.read_table(tmp_path / "samples.parquet").to_pylist()
    responses = [(r["tokens"][-r["response_length"] :], r["loss_mask"]) for r in table]
    trained = [[t for t, m in zip(tokens, mask, strict=True) if m] for tokens, mask in responses]
    return sum(summary.totals.forks.values()) + summary.totals.realigns, trained


def test_a_canonical_log_rebuilds_without_drift_forks_and_trains_exactly_the_outputs(
    qwen3: Renderer, tmp_path: Path
) -> None:
    canonical = Played(CanonicalHistory(qwen3, qwen3.end_of_turn), qwen3)
    _coding_session(canonical)
    forks, trained = _rebuild_forks(tmp_path / "canonical", canonical)  # forks and realigns
    assert forks == 0
    assert trained == [[t for _, output, _, _ in canonical.turns for t in output]]
    rendered = Played(RenderedHistory(qwen3), qwen3)
    _coding_session(rendered)
    forks, _ = _rebuild_forks(tmp_path / "render", rendered)
    assert forks == 2  # turn 2: the arguments re-serialized; turn 3: the reasoning dropped


def _fallback(qwen3: Renderer, messages: list[dict[str, Any]], tools: Any = TOOLS) -> Prompt:
    history = CanonicalHistory(qwen3, qwen3.end_of_turn)
    play = Played(history, qwen3)
    _coding_session(play)
    prompt = history.prompt("s1", messages, tools)
    assert prompt.history == RENDERED
    assert list(prompt.ids) == RenderedHistory(qwen3).prompt("s1", messages, tools).ids  # exactly as render would
    return prompt


SYSTEM = {"role": "system", "content": "You are a coding agent."}


@pytest.mark.parametrize(
    ("messages", "reason"),
    [
        ([{"role": "system", "content": "You are a sub-agent."}, {"role": "user", "content": "Find tests."}],
         HISTORY_REWRITTEN),  # a sub-agent's own conversation
        ([SYSTEM, {"role": "user", "content": "Summary of the work so far: fixed a.py. Continue."}],
         HISTORY_REWRITTEN),  # a compaction restart
        ([SYSTEM, {"role": "user", "content": "Fix the failing test, in b.py."},
          _answer(None, "Let me look.", [("bash", {"cmd": "ls"})]), {"role": "tool", "content": "b.py"}],
         HISTORY_REWRITTEN),  # an earlier message rewritten
        ([SYSTEM, {"role": "user", "content": "Fix the failing test."}], HISTORY_REWRITTEN),  # a retry from turn 1
    ],
)
def test_conversations_that_do_not_continue_a_held_turn_fall_back_with_their_reason(
    qwen3: Renderer, messages: list[dict[str, Any]], reason: str
) -> None:
    assert _fallback(qwen3, messages).reason == reason


def test_changed_tools_fall_back(qwen3: Renderer) -> None:
    system = {"role": "system", "content": "You are a coding agent."}
    user = {"role": "user", "content": "Fix the failing test."}
    a1 = _answer("I should look at the files.", "Let me look.", [("bash", {"cmd": "ls"})])
    messages = [system, user, _echo(a1, keep_reasoning=True), {"role": "tool", "content": "a.py"}]
    assert _fallback(qwen3, messages, tools=[*TOOLS, {**TOOLS[0], "function": {**TOOLS[0]["function"], "name": "sh"}}]
                     ).reason == TOOLS_CHANGED


def test_a_retry_of_the_last_turn_continues_the_turn_before_it(qwen3: Renderer) -> None:
    history = CanonicalHistory(qwen3, qwen3.end_of_turn)
    play = Played(history, qwen3)
    _coding_session(play)
    (p2, _, messages2, _) = play.turns[1]
    again = history.prompt("s1", messages2, TOOLS)
    assert (again.history, again.ids) == (CANONICAL, p2.ids)


def test_an_output_cut_at_the_length_limit_is_not_continued(qwen3: Renderer) -> None:
    history = CanonicalHistory(qwen3, qwen3.end_of_turn)
    messages = [SYSTEM, {"role": "user", "content": "Explain."}]
    prompt = history.prompt("s1", messages, None)
    history.remember("s1", prompt, messages, None, qwen3.encode("<think>\nlong"), _answer("long", ""))
    nxt = history.prompt("s1", [*messages, _answer("long", ""), {"role": "user", "content": "Go on."}], None)
    assert (nxt.history, nxt.reason) == (RENDERED, OUTPUT_NOT_ENDED)


def test_a_template_that_does_not_render_the_new_message_is_not_continued(qwen3: Renderer) -> None:
    # A template that drops tool results entirely: nothing marks where the new text starts.
    template = (
        "{% for m in messages %}{% if m.role != 'tool' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    renderer = Renderer(QWEN3, ("<|im_end|>",), template)
    history = CanonicalHistory(renderer, renderer.end_of_turn)
    messages = [{"role": "user", "content": "Hi"}]
    prompt = history.prompt("s", messages, None)
    answer = _answer(None, "Hello")
    history.remember("s", prompt, messages, None, renderer.encode("Hello<|im_end|>"), answer)
    nxt = history.prompt("s", [*messages, answer, {"role": "tool", "content": "x"}], None)
    assert (nxt.history, nxt.reason) == (RENDERED, NOT_APPEND_ONLY)


def test_a_template_with_other_markers_that_trims_content_is_continued_generically() -> None:
    if not LLAMA3.is_dir():
        why = "the Llama 3 tokenizer comes from npm: npm ci --prefix tests/npm"
        if os.environ.get("CI"):  # CI runs npm ci: there a missing tokenizer is a failure
            pytest.fail(why)
        pytest.skip(why)
    llama = Renderer(LLAMA3, ("<|eot_id|>",))
    history = CanonicalHistory(llama, llama.end_of_turn)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name a prime."}]
    p1 = history.prompt("s", messages, None)
    output = llama.encode("  Seven. \n<|eot_id|>")  # the template trims what the model wrote around it
    answer = _answer(None, "  Seven. \n")
    history.remember("s", p1, messages, None, output, answer)
    follow = [*messages, {"role": "assistant", "content": "Seven."}, {"role": "user", "content": "Another?"}]
    p2 = history.prompt("s", follow, None)
    assert p2.history == CANONICAL
    assert list(p2.ids[: p2.held]) == [*p1.ids, *output]
    assert llama.decode(p2.ids[p2.held :]) == (
        "<|start_header_id|>user<|end_header_id|>\n\nAnother?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    rendered = RenderedHistory(llama).prompt("s", follow, None)
    assert list(rendered.ids[: p2.held]) != list(p2.ids[: p2.held])  # render drifts: the whitespace is gone


def test_identity_ignores_what_clients_change_on_echo() -> None:
    held = _answer("think", "Text ", [("bash", {"cmd": "ls", "n": 1})])
    echoed = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Text", "cache_control": {"type": "ephemeral"}}],
        "signature": "abc",
        "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "bash", "arguments": '{"n":1,"cmd":"ls"}'}}
        ],
    }
    assert same_message(echoed, held)
    assert not same_message({**echoed, "reasoning_content": "other thought"}, held)
    assert not same_message({**echoed, "content": "Changed"}, held)
    changed_args = {**echoed, "tool_calls": [{"function": {"name": "bash", "arguments": '{"cmd": "ls -la", "n": 1}'}}]}
    assert not same_message(changed_args, held)


def test_held_state_is_bounded_and_forgotten(qwen3: Renderer) -> None:
    now = [0.0]
    history = CanonicalHistory(qwen3, qwen3.end_of_turn, max_sessions=2, idle_seconds=10, clock=lambda: now[0])
    for sid in ("a", "b", "c"):
        messages = [SYSTEM, {"role": "user", "content": sid}]
        Played(history, qwen3).turn(sid, messages, "ok<|im_end|>", _answer(None, "ok"))
    assert history.held_sessions == 2  # "a", the least recently used, was forgotten
    history.forget("b")
    assert history.held_sessions == 1
    now[0] = 11.0
    history.prompt("c", [SYSTEM], None)
    assert (history.held_sessions, history.held_tokens) == (0, 0)
    tokens = CanonicalHistory(qwen3, qwen3.end_of_turn, max_held_tokens=10)
    Played(tokens, qwen3).turn("a", [SYSTEM, {"role": "user", "content": "hi"}], "ok<|im_end|>", _answer(None, "ok"))
    assert tokens.held_sessions == 0  # one turn over the token cap is not held at all


@pytest.fixture(scope="module")
def history_log(qwen3: Renderer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A log of a coding session played through the canonical history: two turns continued, two rendered."""
    from tito_cli import TurnLogWriter

    history = CanonicalHistory(qwen3, qwen3.end_of_turn)
    play = Played(history, qwen3)
    _coding_session(play)
    sub = [{"role": "system", "content": "You are a sub-agent."}, {"role": "user", "content": "Find tests."}]
    play.turn("s1", sub, "test_a.py<|im_end|>", _answer(None, "test_a.py"))
    logs = tmp_path_factory.mktemp("history") / "logs"
    with TurnLogWriter(logs, tokenizer=str(QWEN3)) as log:
        for prompt, output, _, answer in play.turns:
            log.record_turn("s1", prompt.ids, output, None, "stop", prompt.messages, answer, TOOLS, prompt.metadata())
        log.finish_session("s1", 1.0)
    return logs


def test_stats_counts_how_each_turn_was_built(tito: Callable[..., Result], history_log: Path) -> None:
    assert json.loads(tito("stats", history_log, "--json", expect=0).stdout)["capture_history"] == {
        "canonical": 2,
        "rendered": 2,
        "rendered_by_reason": {"history rewritten": 1, "no held turn": 1},
    }
    shown = tito("stats", history_log, expect=0).stdout
    assert "capture history" in shown and "history rewritten" in shown


def test_inspect_shows_how_each_turn_was_built(tito: Callable[..., Result], history_log: Path) -> None:
    rows = json.loads(tito("inspect", "s1", history_log, "--json", expect=0).stdout)["turns"]
    assert [r["history"] for r in rows] == [
        "rendered: no held turn", "canonical", "canonical", "rendered: history rewritten"
    ]


def test_view_shows_how_each_turn_was_built(tito: Callable[..., Result], history_log: Path, tmp_path: Path) -> None:
    page = tmp_path / "view.html"
    tito("view", "s1", "--logs", history_log, "--out", page, expect=0)
    assert '"history":"rendered: history rewritten"' in page.read_text(encoding="utf-8")  # the page's data


def test_the_new_text_from_the_window_is_the_new_text_of_the_whole_conversation(qwen3: Renderer) -> None:
    """The cheap render (leading system messages, answer, new messages) finds what the whole one finds."""
    history = CanonicalHistory(qwen3, qwen3.end_of_turn)
    play = Played(history, qwen3)
    _coding_session(play)
    checked = 0
    for (before, _, messages_before, answer), (after, _, messages, _) in itertools.pairwise(play.turns):
        new = messages[len(messages_before) + 1 :]
        held = before.messages
        window = history._text_after(held[:1], answer, new, TOOLS)
        whole = history._text_after(held, answer, new, TOOLS)
        assert window is not None and window == whole
        assert qwen3.decode(after.ids[after.held :]) == window
        checked += 1
    assert checked == 2


def test_a_continued_prompt_serializes_only_its_new_messages(qwen3: Renderer) -> None:
    """The held turn's message texts are reused (the same strings), so the writer's work follows the new text."""
    play = Played(CanonicalHistory(qwen3, qwen3.end_of_turn), qwen3)
    _coding_session(play)
    for (before, _, _, _), (after, _, _, _) in itertools.pairwise(play.turns):
        assert before.texts is not None and after.texts is not None and after.history == CANONICAL
        assert after.recorded_messages() is after.texts and after.texts.values == after.messages
        assert after.texts.texts == [json.dumps(m, ensure_ascii=False) for m in after.messages]
        held = len(before.messages)
        assert all(a is b for a, b in zip(after.texts.texts[:held], before.texts.texts, strict=True))


def test_a_message_the_log_cannot_hold_still_gets_its_prompt_and_the_writer_says_why(
    qwen3: Renderer, tmp_path: Path
) -> None:
    from tito_cli import TurnLogWriter

    history = CanonicalHistory(qwen3, qwen3.end_of_turn)
    # Python's JSON parser reads NaN (a client's tool-call arguments), which is not JSON.
    call = {"id": "toolu_x", "type": "function", "function": {"name": "bash", "arguments": {"n": float("nan")}}}
    messages = [{"role": "user", "content": "Go."}, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "toolu_x", "content": "done"}]
    prompt = history.prompt("s", messages, None)
    assert prompt.texts is None and prompt.recorded_messages() is prompt.messages and len(prompt.ids) > 0
    with TurnLogWriter(tmp_path / "log", max_age=None) as log, pytest.raises(ValueError, match="cannot be stored"):
        log.record_turn("s", prompt.ids, [1], [-0.5], "stop", prompt.recorded_messages(), _answer("", "ok"))
