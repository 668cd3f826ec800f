"""The render history's tokenization by pieces gives exactly the ids whole-text tokenization gives.

Checked turn by turn, one session after another, for every family with a tokenizer here: the shipped
Qwen3 log (fixtures/logs), sessions ``tito simulate`` renders through each family's real template and
tokenizer, and hypothesis-made conversations whose contents spell the tokenizer's own special tokens
(a user typing ``<|im_end|>``: the template renders it verbatim and whole-text tokenization makes it the
special token, so the pieces must too).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import AddedToken

from tests.support.family_logs import TOKENIZERS, tokenizer_folder
from tests.support.helpers import REPO
from tito_cli.serve.exchange import ClientError
from tito_cli.serve.history import RenderedHistory
from tito_cli.serve.incremental import PieceEncoder, marks_of
from tito_cli.serve.template import ChatTemplate
from tito_cli.serve.upstreams.base import tool_arguments_object, with_arguments
from tito_cli.simulate import simulate

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"
FAMILIES = ["qwen3", *sorted(TOKENIZERS)]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request: pytest.FixtureRequest) -> str:
    return str(request.param)


_templates: dict[str, ChatTemplate] = {}


def template_of(family: str) -> ChatTemplate:
    if family not in _templates:
        _templates[family] = ChatTemplate(str(QWEN3 if family == "qwen3" else tokenizer_folder(family)))
    return _templates[family]


def whole(template: ChatTemplate, text: str) -> list[int]:
    return list(template.backend.encode(text, add_special_tokens=False).ids)


def logged_turns(logs: Path) -> Iterator[tuple[str, list[dict[str, Any]], Any]]:
    """Each turn's session, prompt messages and tools, sessions one after another, turns in order."""
    rows = []
    for path in sorted(logs.glob("turns-*.parquet")):
        rows += pq.read_table(path, columns=["session_id", "seq", "prompt_messages", "tools"]).to_pylist()
    rows.sort(key=lambda row: (row["session_id"], int(row["seq"] or 0)))
    for row in rows:
        messages = json.loads(row["prompt_messages"] or "[]")
        if messages:
            yield row["session_id"], messages, json.loads(row["tools"]) if row["tools"] else None


def replay(template: ChatTemplate, logs: Path) -> int:
    """Every turn of ``logs`` rendered as the generate upstream renders it, tokenized both ways."""
    history = RenderedHistory(template, PieceEncoder(template.backend))
    checked = 0
    for session_id, messages, tools in logged_turns(logs):
        try:
            prompt = history.prompt(session_id, with_arguments(messages, tool_arguments_object), tools)
        except ClientError:  # a turn this template refuses is refused the same way either way
            continue
        text = template.render(with_arguments(messages, tool_arguments_object), tools)
        expected = whole(template, text)
        assert list(prompt.ids) == expected, f"session {session_id}: pieces differ from whole-text ids"
        assert prompt.ids_json is not None and json.loads(prompt.ids_json) == expected, session_id
        checked += 1
    return checked


def test_the_shipped_log_tokenizes_as_whole() -> None:
    checked = replay(template_of("qwen3"), REPO / "fixtures" / "logs")
    assert checked > 300


@pytest.mark.slow  # every family's sessions, turn by turn
def test_each_familys_simulated_sessions_tokenize_as_whole(family: str, tmp_path: Path) -> None:
    template = template_of(family)
    if family == "qwen3":
        simulate(tmp_path, 6, 5, "swe")
    else:
        simulate(tmp_path, 6, 3, family, tokenizer=TOKENIZERS[family].hub_name, tokenizer_dir=template.folder)
    checked = replay(template, tmp_path)
    assert checked >= 10, f"{family}: only {checked} turns rendered"


def _spelled_marks(template: ChatTemplate) -> list[str]:
    added = [t.content for t in template.backend.get_added_tokens_decoder().values()]
    return [*sorted(added), "<|im_end|>", "<|im_start|>", "<think>", "</think>", "<|im_end", "|>"]


@pytest.mark.slow  # 60 examples per family through real tokenizers
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_contents_spelling_special_tokens_keep_whole_text_ids(family: str, data: st.DataObject) -> None:
    template = template_of(family)
    marks = _spelled_marks(template)
    pieces = PieceEncoder(template.backend)
    chunk = st.one_of(st.sampled_from(marks), st.sampled_from([" ", "\n", "\n\n", "  ", "é", "日本", "a b"]),
                      st.text(max_size=12))
    content = st.lists(chunk, max_size=8).map("".join)
    messages: list[dict[str, Any]] = [{"role": "system", "content": data.draw(content)}]
    for _ in range(data.draw(st.integers(1, 4))):
        messages.append({"role": "user", "content": data.draw(content)})
        try:
            text = template.render(list(messages), None)
        except ClientError:
            break
        ids, ids_json = pieces.encode("s", text)
        assert list(ids) == whole(template, text), repr(text)
        assert json.loads(ids_json) == list(ids)
        messages.append({"role": "assistant", "content": data.draw(content)})


def test_marks_leave_out_tokens_the_split_could_move() -> None:
    backend = ChatTemplate(str(QWEN3)).backend
    backend.add_special_tokens([
        AddedToken("<grab>", lstrip=True, special=True),
        AddedToken("<|im_start|>x", special=True),
        AddedToken("<|im_end|>!", lstrip=True, special=True),
        AddedToken("[<think>]", special=True),
    ])
    marks = marks_of(backend)
    assert "<grab>" not in marks  # it takes the whitespace before it: cutting there would move it
    assert "<|im_end|>!" not in marks and "<|im_end|>" not in marks  # it begins one that is not a mark
    assert "<think>" not in marks  # found inside another added token: that one may match, starting earlier
    assert "<|im_start|>x" in marks and "<|im_start|>" in marks  # the longer of two marks is the cut
    text = "hi  <grab> there<|im_start|>x<|im_end|>\n<|im_start|>user [<think>] <think> a  <|im_end|>!"
    assert list(PieceEncoder(backend).encode("s", text)[0]) == backend.encode(text, add_special_tokens=False).ids


def test_only_new_pieces_are_encoded_and_sessions_are_bounded() -> None:
    template = template_of("qwen3")
    calls: list[list[str]] = []

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def get_added_tokens_decoder(self) -> Any:
            return self.inner.get_added_tokens_decoder()

        def encode_batch(self, texts: list[str], add_special_tokens: bool) -> Any:
            calls.append(texts)
            return self.inner.encode_batch(texts, add_special_tokens=add_special_tokens)

    pieces = PieceEncoder(Counting(template.backend), max_sessions=2)
    one = [{"role": "user", "content": "x " * 500}]
    two = [*one, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "next"}]
    pieces.encode("a", template.render(one, None))
    pieces.encode("a", template.render(two, None))
    assert "x " * 100 not in "".join(calls[-1])  # the long first message's ids were reused
    pieces.encode("b", "b")
    pieces.encode("c", "c")
    assert pieces.held_sessions == 2  # "a", least recently used, was forgotten
    pieces.forget("b")
    assert pieces.held_sessions == 1 and pieces.held_chars == 1
