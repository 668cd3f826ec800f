"""One set of record rules (capture/records.py): what the writer accepts, every importer and the rebuild accept.

The writer refuses what a rebuild would reject a session for; an import rejects a session whole, naming
the record, for exactly what the writer refuses (never an internal error after a first turn is written);
the reader's incremental prompt parser accepts exactly what its full parser accepts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tito_cli.capture.importing import import_traces
from tito_cli.capture.writer import TurnLogWriter
from tito_cli.errors import InvalidSessionError
from tito_cli.read.columns import RawTurn
from tito_cli.read.rows import SessionRows
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild
from tito_cli.turns import RowRef

USER = {"role": "user", "content": "hi"}
REPLY = {"role": "assistant", "content": "ok"}


def _rebuild_rejects(log: Path, tmp_path: Path) -> list[str]:
    """The reasons a rebuild of ``log`` rejects sessions for."""
    out = tmp_path / "samples.parquet"
    summary = rebuild([log], out, overwrite=True)
    return [r.reason for r in summary.rejected]


def test_the_writer_refuses_a_logprob_count_the_rebuild_would_reject_the_session_for(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path / "log", max_age=None) as log, pytest.raises(ValueError, match="1 logprobs, 3 output"):
        log.record_turn("s", [1, 2], [3, 4, 5], [-0.5], "stop", [USER], REPLY)


def test_a_logprob_count_in_a_turn_without_prompt_messages_is_accepted_by_writer_and_rebuild_alike(
    tmp_path: Path,
) -> None:
    # SPEC §3: a turn whose prompt has no messages is skipped before its logprobs are counted.
    with TurnLogWriter(tmp_path / "log", max_age=None) as log:
        log.record_turn("s", [1, 2], [3, 4, 5], [-0.5], "stop", [], REPLY)
        log.record_turn("s", [1, 2], [3, 4, 5], [-0.5, -0.1, -0.2], "stop", [USER], REPLY)
        log.finish_session("s", 1.0)
    assert _rebuild_rejects(tmp_path / "log", tmp_path) == []


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('[{"role": "user", "content": "hi"}', "prompt_messages is not valid JSON"),
        ('[{"role": "user", "content": NaN}]', "prompt_messages is not valid JSON"),
        ("null", "prompt_messages is not a JSON array"),
        ('{"role": "user"}', "prompt_messages is not a JSON array"),
        ("[1]", "prompt message 0 is not a JSON object"),
        ('[{"content": "no role"}]', "prompt message 0 has no string 'role'"),
        ('[{"role": "user"},\f{"role": "user"}]', "prompt_messages is not valid JSON"),
    ],
)
def test_the_writer_refuses_prompt_messages_text_the_rebuild_would_reject(
    text: str, reason: str, tmp_path: Path
) -> None:
    with TurnLogWriter(tmp_path / "log", max_age=None) as log, pytest.raises(ValueError, match=reason):
        log.record_turn("s", [1, 2], [3], [-0.5], "stop", text, REPLY)


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("response_message", "[1, 2]", "response_message is not a JSON object"),
        ("response_message", '{"role": "assistant"', "response_message is not valid JSON"),
        ("tools", {"name": "grep"}, "tools is not a JSON array"),
        ("metadata", "[]", "metadata is not a JSON object"),
    ],
)
def test_the_writer_refuses_json_cells_of_the_wrong_kind(field: str, value: Any, reason: str, tmp_path: Path) -> None:
    cells: dict[str, Any] = {"response_message": REPLY, "tools": None, "metadata": None, field: value}
    with TurnLogWriter(tmp_path / "log", max_age=None) as log, pytest.raises(ValueError, match=reason):
        log.record_turn("s", [1, 2], [3], None, "stop", [USER], **cells)


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ('{"score": 1e400}', "sessions metadata holds a number beyond float64"),
        ('{"note": "\\ud800"}', "sessions metadata holds a lone surrogate"),
        ('{"tito": 1}', "sessions metadata has a key 'tito'"),
        ("[1, 2]", "sessions metadata is not a JSON object"),
    ],
)
def test_the_writer_refuses_sessions_metadata_text_the_reader_would_reject_the_session_for(
    metadata: str, reason: str, tmp_path: Path
) -> None:
    with TurnLogWriter(tmp_path / "log", max_age=None) as log, pytest.raises(ValueError, match=reason):
        log.finish_session("s", 1.0, metadata=metadata)


def test_prompt_messages_given_as_text_are_stored_as_given_and_rebuild_like_the_values(tmp_path: Path) -> None:
    as_text = json.dumps([USER])
    for name, messages in (("text", as_text), ("values", [USER])):
        with TurnLogWriter(tmp_path / name, max_age=None, format=1) as log:
            log.record_turn("s", [1, 2], [3, 4], [-0.5, -0.25], "stop", messages, REPLY)
            log.record_turn("s", [1, 2, 3, 4, 5], [6], [-0.1], "stop", [USER, REPLY, USER], REPLY)
            log.finish_session("s", 1.0)
    samples = []
    for name in ("text", "values"):
        assert rebuild([tmp_path / name], tmp_path / f"{name}.parquet").rejected == []
        table = pq.read_table(tmp_path / f"{name}.parquet", columns=["tokens", "loss_mask", "rollout_log_probs"])
        samples.append(table.to_pylist())
    assert samples[0] == samples[1] and len(samples[0]) == 1


# -- importers accept exactly what the writer accepts -------------------------------------------------


def _exchange(sid: str, messages: Any, output: list[int], *, logprobs: list[float] | None = None,
              finish: str = "stop", response: Any = None) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": response if response is not None else {"role": "assistant", "content": "ok"},
        "finish_reason": finish,
        "token_ids": output,
    }
    if logprobs is not None:
        choice["logprobs"] = {
            "content": [{"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(output, logprobs, strict=False)]
        }
    return {
        "session_id": sid,
        "request": {"model": "m", "messages": messages},
        "response": {"prompt_token_ids": [1, 2, 3], "choices": [choice]},
    }


def _import(tmp_path: Path, records: list[dict[str, Any]] | list[str]) -> Any:
    source = tmp_path / "exchanges.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records]
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return import_traces("openai-exchanges", [source], tmp_path / "log")


def _second_turn_line(content_json: str) -> str:
    """A second exchange whose response content is ``content_json`` (raw JSON text, possibly not strict JSON)."""
    good = json.dumps(_exchange("bad", [USER, REPLY, USER], [7, 8]))
    return good.replace('"content": "ok"}, "finish_reason"', f'"content": {content_json}}}, "finish_reason"')


@pytest.mark.parametrize(
    ("content_json", "reason"),
    [
        ("NaN", "response_message cannot be stored as JSON"),
        ('"\\ud800"', "response_message is not encodable as UTF-8"),
    ],
)
def test_a_later_turn_the_writer_would_refuse_rejects_its_session_whole_and_imports_the_rest(
    content_json: str, reason: str, tmp_path: Path
) -> None:
    line = _second_turn_line(content_json)
    assert content_json in line
    records = [json.dumps(_exchange("bad", [USER], [4, 5])), line, json.dumps(_exchange("good", [USER], [4, 5]))]
    summary = _import(tmp_path, records)
    assert [s.session_id for s in summary.sessions] == ["good"]
    [refused] = summary.rejected
    assert (refused.session_id, refused.row) == ("bad", 2)
    assert refused.reason.startswith(reason)


def test_an_import_accepts_what_the_writer_and_the_rebuild_accept_a_turn_without_prompt_messages(
    tmp_path: Path,
) -> None:
    # Its logprobs are not counted (SPEC §3 skips the turn): the writer records it, so the import does.
    records = [
        _exchange("s", [], [4, 5, 6], logprobs=[-0.5, -0.25]),
        _exchange("s", [USER], [4, 5], logprobs=[-0.5, -0.25]),
    ]
    summary = _import(tmp_path, records)
    assert [(s.session_id, s.turns) for s in summary.sessions] == [("s", 2)] and summary.rejected == []
    assert _rebuild_rejects(tmp_path / "log", tmp_path) == []


def test_an_import_rejects_a_logprob_count_with_the_writers_reason(tmp_path: Path) -> None:
    summary = _import(tmp_path, [_exchange("s", [USER], [4, 5, 6], logprobs=[-0.5, -0.25])])
    [refused] = summary.rejected
    assert refused.reason == "output_logprobs length differs from output_ids length (2 logprobs, 3 output ids)"


# -- the reader's incremental prompt parser accepts exactly what the full parser accepts ------------


def _row(seq: int, messages: str) -> RawTurn:
    ids = np.array([1, 2], dtype=np.int32)
    return RawTurn(
        seq=seq,
        prompt_ids=ids,
        output_ids=np.array([3], dtype=np.int32),
        output_logprobs=None,
        finish_reason="stop",
        prompt_messages=messages,
        response_message=json.dumps(REPLY),
        tools=None,
        metadata=None,
        source=RowRef("log.parquet", seq),
    )


@pytest.mark.parametrize("space", ["\f", "\u00a0", "\u2003", "\v"])
def test_a_space_json_does_not_allow_between_messages_rejects_the_session_however_the_prompt_is_parsed(
    space: str,
) -> None:
    first = json.dumps([USER])
    extended = first[:-1] + space + ", " + json.dumps(REPLY) + "]"
    with pytest.raises(ValueError):
        json.loads(extended)  # (the full parser's verdict)
    with pytest.raises(InvalidSessionError, match="prompt_messages is not valid JSON") as caught:
        parse_session(SessionRows("s", [_row(0, first), _row(1, extended)]))
    assert caught.value.row == 1


def test_json_whitespace_between_messages_is_still_parsed_incrementally() -> None:
    first = json.dumps([USER])
    extended = first[:-1] + " \t\r\n, " + json.dumps(REPLY) + "]"
    turns = parse_session(SessionRows("s", [_row(0, first), _row(1, extended)]))
    assert turns[1].prompt_messages == [USER, REPLY] and turns[1].extends is not None


# -- prompt messages serialized once (PromptMessages) ---------------------------------------------------


def _grown_turns() -> list[tuple[list[int], list[int], list[dict[str, Any]], dict[str, Any]]]:
    """Four turns of one conversation, each extending the last: (prompt ids, output ids, messages, answer)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent. Ünïcode ✓"}, USER]
    ids = [1, 2, 3]
    turns = []
    for k in range(4):
        output = [10 + k, 11 + k]
        answer = {"role": "assistant", "content": f"step {k}",
                  "tool_calls": [{"id": f"c{k}", "type": "function",
                                  "function": {"name": "read", "arguments": {"path": f"é{k}.txt", "n": 1.0}}}]}
        turns.append((list(ids), output, list(messages), answer))
        messages = [*messages, answer, {"role": "tool", "tool_call_id": f"c{k}", "content": f"part {k}\n"}]
        ids = [*ids, *output, 20 + k, 21 + k]
    return turns


@pytest.mark.parametrize("format", [1, 2])
def test_prompt_messages_given_serialized_and_ids_as_an_int_array_log_the_same_bytes(
    format: int, tmp_path: Path
) -> None:
    from array import array
    from datetime import datetime, timezone

    from tito_cli.capture.records import PromptMessages

    when = datetime(2026, 1, 1, tzinfo=timezone.utc)
    tables = []
    for name in ("values", "serialized"):
        held: PromptMessages | None = None
        with TurnLogWriter(tmp_path / name, max_age=None, format=format, name="run") as log:
            for prompt_ids, output, messages, answer in _grown_turns():
                given: Any = messages
                ids: Any = prompt_ids
                if name == "serialized":  # as the gateway's canonical history hands them over
                    held = PromptMessages.of(messages) if held is None else held.extend(messages[len(held):])
                    given, ids = held, array("i", prompt_ids)
                log.record_turn("s", ids, output, [-0.5] * len(output), "stop", given, answer, timestamp=when)
        tables.append(pq.read_table(tmp_path / name).to_pylist())
    assert tables[0] == tables[1] and len(tables[0]) == 4
    if format == 2:  # stored against the turn before (its prompt and answer shared), with only the new message
        assert [row["shared_messages"] for row in tables[1]] == [None, 3, 5, 7]
        assert [m["content"] for m in json.loads(tables[1][3]["prompt_messages"])] == ["part 2\n"]


@pytest.mark.parametrize(
    ("message", "reason", "writer_reason"),
    [
        (["not a message"], "prompt message 2 is not a JSON object", "prompt message 2 is not a JSON object"),
        ({"content": "no role"}, "prompt message 2 has no string 'role'", "prompt message 2 has no string 'role'"),
        ({"role": "user", "content": float("nan")}, "prompt message 2 cannot be stored as JSON",
         "prompt_messages cannot be stored as JSON"),
        ({"role": "user", "content": "\ud800"}, "prompt message 2 is not encodable as UTF-8",
         "prompt_messages is not encodable as UTF-8"),
    ],
)
def test_serialized_prompt_messages_refuse_what_the_writer_refuses_naming_the_message(
    message: Any, reason: str, writer_reason: str, tmp_path: Path
) -> None:
    from tito_cli.capture.records import PromptMessages

    held = PromptMessages.of([USER, REPLY])
    with pytest.raises(ValueError, match=reason):
        held.extend([message])
    with TurnLogWriter(tmp_path / "log", max_age=None) as log, pytest.raises(ValueError, match=writer_reason):
        log.record_turn("s", [1, 2], [3], [-0.5], "stop", [USER, REPLY, message], REPLY)
    with pytest.raises(TypeError, match=r"PromptMessages\.of"):
        PromptMessages((), (), object())


def test_ids_given_as_an_int_array_are_copied_when_recorded(tmp_path: Path) -> None:
    from array import array

    ids = array("i", [1, 2, 3])
    with TurnLogWriter(tmp_path / "log", max_age=None, format=1) as log:
        log.record_turn("s", ids, [4], [-0.5], "stop", [USER], REPLY)
        ids[0] = 99  # the caller reuses its array: the buffered row keeps what was recorded
        ids.append(5)  # (and it may grow: nothing of it is held)
    assert pq.read_table(tmp_path / "log").column("prompt_ids").to_pylist() == [[1, 2, 3]]
