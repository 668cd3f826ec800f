"""``tito import rllm`` on trace stores written by the real ``rllm-model-gateway``.

The gateway runs on 127.0.0.1 as its own process (its CLI, SQLite store) in
front of a vLLM-shaped upstream (``vllm_upstream.py``); the real ``openai``
client drives three sessions through its per-session URLs: a tool call and
its result, a resent prompt, and a streamed conversation.  The expected
samples come from what the upstream saw and generated, rebuilt by the
spec's literal model (``spec_model.py``), not from the gateway's records.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.helpers import needs
from tests.support.imports import turns_of
from tests.support.spec_model import model_rebuild
from tito_cli.capture.importers.rllm import resolve_prompt
from tito_cli.capture.importing import import_traces
from tito_cli.run.rebuild import rebuild


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[SimpleNamespace]:
    # The real gateway and the openai client that drives it: the import extra.
    needs("rllm_model_gateway", "import")
    needs("openai", "import")
    from tests.support.rllm_gateway import running_gateway

    with running_gateway(tmp_path / "traces.db", tmp_path / "gateway.log") as running:
        yield running


def without_nulls(message: Any) -> Any:
    if isinstance(message, dict):
        return {
            k: without_nulls(v) for k, v in message.items() if v is not None and not (k == "tool_calls" and v == [])
        }
    return [without_nulls(v) for v in message] if isinstance(message, list) else message


def expected_samples(calls: list[dict[str, Any]], rewards: dict[str, float]) -> dict[str, list[Any]]:
    """Each session's samples by the spec model, from the upstream's own record of the calls.

    A response message is the one the agent sent back in a later call when that equals the server's
    without its null fields (what the import aligns it to), else the server's.
    """
    by_session: dict[str, list[SimpleNamespace]] = {}
    sessions = {"multiply": "tool-session", "hello there": "retry-session", "count to three": "stream-session"}
    for call in calls:
        text = json.dumps(call["messages"])
        sid = next(s for key, s in sessions.items() if key in text or (key == "multiply" and call["tools"]))
        turns = by_session.setdefault(sid, [])
        message = call["message"]
        if call["stream"]:
            # The gateway rebuilds a streamed message from the deltas: role and content only.
            message = {"role": "assistant", "content": message["content"]}
        turns.append(
            SimpleNamespace(
                seq=len(turns),
                prompt_ids=call["prompt_ids"],
                output_ids=call["output_ids"],
                output_logprobs=call["logprobs"],
                prompt_messages=call["messages"],
                response_message=message,
            )
        )
    for turns in by_session.values():
        for i, turn in enumerate(turns):
            later = [m for t in turns[i + 1 :] for m in t.prompt_messages if m["role"] == "assistant"]
            sent_back = [m for m in later if without_nulls(m) == without_nulls(turn.response_message)]
            if sent_back:
                turn.response_message = sent_back[0]
    return {sid: model_rebuild(turns, 1024, rewards[sid], "split") for sid, turns in by_session.items()}


@pytest.mark.slow  # the real rLLM model gateway as a process
def test_a_gateway_trace_store_rebuilds_to_the_samples_of_the_calls_it_proxied(
    gateway: SimpleNamespace, tmp_path: Path
) -> None:
    from tests.support.rllm_gateway import TOOLS, drive, stop, wait_for_traces

    expected_calls = drive(gateway.base)
    wait_for_traces(gateway.base, expected_calls)
    stop(gateway.process)

    rewards = {"tool-session": 1.0, "retry-session": 0.5, "stream-session": 0.0}
    rewards_file = tmp_path / "rewards.jsonl"
    rewards_file.write_text("".join(json.dumps({"session_id": s, "reward": r}) + "\n" for s, r in rewards.items()))
    summary = import_traces(
        "rllm", [gateway.db], tmp_path / "log", rewards=rewards_file, tokenizer="fixtures/tokenizer"
    )
    assert summary.rejected == []
    assert {s.session_id: s.turns for s in summary.sessions} == expected_calls
    by_id = {s.session_id: s for s in summary.sessions}
    assert all(s.reward_from == "rewards file" for s in summary.sessions)
    assert any("streamed calls" in note for note in by_id["stream-session"].filled)
    assert not any("streamed calls" in note for note in by_id["tool-session"].filled)

    result = rebuild([tmp_path / "log"], tmp_path / "samples.parquet", workers=1)
    assert result.rejected == []
    table = pq.read_table(tmp_path / "samples.parquet").to_pylist()
    want = expected_samples(gateway.upstream.calls, rewards)
    for sid, samples in want.items():
        got = [row for row in table if row["session_id"] == sid]
        assert [row["tokens"] for row in got] == [s.tokens for s in samples], sid
        assert [row["loss_mask"] for row in got] == [s.loss_mask for s in samples], sid
        assert [row["rollout_log_probs"] for row in got] == [s.rollout_log_probs for s in samples], sid
        assert [row["reward"] for row in got] == [s.reward for s in samples], sid
    # Tools live only in the raw request; they reach the turns.
    turns = pq.read_table(next((tmp_path / "log").glob("turns-*.parquet"))).to_pylist()
    tool_turns = [t for t in turns if t["session_id"] == "tool-session"]
    assert all(json.loads(t["tools"]) == TOOLS for t in tool_turns)


def _delta_store(path: Path, records: list[dict[str, Any]], sessions: dict[str, str]) -> None:
    """A store in the gateway's schema holding delta records (its proposed cumulative-token mode)."""
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE traces (trace_id TEXT PRIMARY KEY, data TEXT NOT NULL, created_at REAL NOT NULL)")
    db.execute(
        "CREATE TABLE trace_sessions (trace_id TEXT NOT NULL, session_id TEXT NOT NULL, created_at REAL NOT NULL,"
        " PRIMARY KEY (trace_id, session_id))"
    )
    for i, record in enumerate(records):
        db.execute("INSERT INTO traces VALUES (?, ?, ?)", (record["trace_id"], json.dumps(record), 100.0 + i))
        db.execute(
            "INSERT INTO trace_sessions VALUES (?, ?, ?)", (record["trace_id"], sessions[record["trace_id"]], 100.0 + i)
        )
    db.commit()
    db.close()


def _record(trace_id: str, sid: str, prompt: list[int] | None, completion: list[int], **extra: Any) -> dict[str, Any]:
    return {
        "trace_id": trace_id,
        "session_id": sid,
        "messages": [{"role": "user", "content": trace_id}],
        "prompt_token_ids": prompt or [],
        "response_message": {"role": "assistant", "content": "ok"},
        "completion_token_ids": completion,
        "logprobs": [-0.5] * len(completion),
        "finish_reason": "stop",
        "timestamp": 1780000000.0,
        "raw_request": {"messages": []},
        "raw_response": {},
        **extra,
    }


def test_delta_records_rebuild_their_prompt_along_the_parent_chain_and_a_broken_chain_rejects_the_session(
    tmp_path: Path,
) -> None:
    records = [
        _record("a1", "a", [1, 2, 3], [4, 5]),
        _record("a2", "a", None, [7], prompt_delta_token_ids=[6], parent_trace_id="a1"),
        _record("a3", "a", None, [9], prompt_delta_token_ids=[8], parent_trace_id="a2"),
        _record("b1", "b", [1], [2]),
        _record("b2", "b", None, [4], prompt_delta_token_ids=[3], parent_trace_id="gone"),
    ]
    store = tmp_path / "traces.db"
    _delta_store(store, records, {r["trace_id"]: r["session_id"] for r in records})
    by_id = {r["trace_id"]: (i, r) for i, r in enumerate(records)}
    assert resolve_prompt("a3", by_id) == [1, 2, 3, 4, 5, 6, 7, 8]
    summary = import_traces("rllm", [store], tmp_path / "log")
    assert [(s.session_id, s.turns) for s in summary.sessions] == [("a", 3)]
    [bad] = summary.rejected
    assert (bad.session_id, bad.file, bad.row) == ("b", str(store), 5)
    assert bad.reason == "trace b2: broken parent chain: parent trace gone is not in the store"
    turns = turns_of(tmp_path / "log")  # (format 2 rows made whole)
    assert [t["prompt_ids"] for t in turns] == [[1, 2, 3], [1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7, 8]]


def test_a_sessions_calls_are_ordered_by_when_their_responses_arrived_not_by_the_stores_write(tmp_path: Path) -> None:
    # The gateway writes traces asynchronously after answering: the second call's write can come first.
    first = _record("t1", "s", [1, 2], [3], timestamp=1780000001.0)
    second = _record("t2", "s", [1, 2, 3, 4], [5], timestamp=1780000002.0)
    store = tmp_path / "traces.db"
    _delta_store(store, [second, first], {"t1": "s", "t2": "s"})  # t2 written (created_at) first
    import_traces("rllm", [store], tmp_path / "log")
    turns = sorted(pq.read_table(next((tmp_path / "log").glob("turns-*.parquet"))).to_pylist(), key=lambda t: t["seq"])
    assert [json.loads(t["metadata"])["trace_id"] for t in turns] == ["t1", "t2"]
