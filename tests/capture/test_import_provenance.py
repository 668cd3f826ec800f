"""Importers keep the provenance their sources carry (issue #42): weight versions, routed experts,
sampling parameters and call kinds reach the turn log's columns and the rebuilt samples.

rLLM's store is written by the real ``rllm-model-gateway`` in front of the vLLM-shaped stand-in, which
reports weight versions in its answers' ``metadata`` as SGLang's and vLLM's OpenAI-compatible routes
do.  NeMo Gym's token entries carry ``routed_experts`` as NeMo Gym stores them (nested lists, or
NeMo-RL's ``nrlre1`` string envelope), made here by the routing function of ``provenance_sessions``
(a function of the prefix alone), so every row of every rebuilt sample is checked against its tokens.
"""

from __future__ import annotations

import base64
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import needs
from tests.support.imports import SOURCES, turns_of
from tests.support.provenance_sessions import LAYERS, TOPK, check_rows, routing
from tito_cli.capture.importing import import_traces
from tito_cli.errors import EXIT_OK


def _rebuild(log: Path, out: Path, *flags: str) -> list[dict[str, Any]]:
    run = tito("rebuild", str(log), "-o", str(out), "-j", "1", *flags)
    assert run.exit_code == EXIT_OK, run.output
    return pq.read_table(out).to_pylist()


@pytest.mark.slow  # the real rLLM model gateway as a process
def test_rllm_keeps_the_weight_versions_the_upstream_reported_and_the_sampling_it_was_sent(tmp_path: Path) -> None:
    needs("rllm_model_gateway", "import")
    needs("openai", "import")
    from openai import OpenAI

    from tests.support.rllm_gateway import running_gateway, stop, wait_for_traces

    def versions(call: int, outputs: int) -> dict[str, Any]:
        if call == 1:
            return {"weight_version": "v7"}
        # An in-place weight update during the second call: two spans, the scalar is the version at its end.
        half = outputs // 2
        spans = [{"version": "v7", "start": 0, "end": half}, {"version": "v8", "start": half, "end": outputs}]
        return {"weight_version": "v8", "weight_versions": spans}

    with running_gateway(tmp_path / "traces.db", tmp_path / "gateway.log", versions) as gateway:
        client = OpenAI(base_url=f"{gateway.base}/sessions/s/v1", api_key="unused", max_retries=0, timeout=30)
        messages: list[Any] = [{"role": "user", "content": "hello there"}]
        first = client.chat.completions.create(model="fixture", messages=messages, temperature=0.5, top_p=0.9)
        messages += [
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "again"},
        ]
        client.chat.completions.create(model="fixture", messages=messages, temperature=0.5, top_p=0.9, max_tokens=64)
        wait_for_traces(gateway.base, {"s": 2})
        stop(gateway.process)
        outputs = [len(call["output_ids"]) for call in gateway.upstream.calls]

    summary = import_traces("rllm", [tmp_path / "traces.db"], tmp_path / "log", tokenizer="fixtures/tokenizer")
    assert summary.rejected == []
    turns = turns_of(tmp_path / "log")
    half = outputs[1] // 2
    assert [json.loads(t["weight_versions"]) for t in turns] == [
        [{"version": "v7", "start": 0, "end": outputs[0]}],
        [{"version": "v7", "start": 0, "end": half}, {"version": "v8", "start": half, "end": outputs[1]}],
    ]
    assert [json.loads(t["sampling"]) for t in turns] == [
        {"temperature": 0.5, "top_p": 0.9},
        {"max_tokens": 64, "temperature": 0.5, "top_p": 0.9},
    ]
    assert all(t.get("routed_experts") is None and t.get("call_kind") is None for t in turns)

    [sample] = _rebuild(tmp_path / "log", tmp_path / "samples.parquet")
    # slime's shape: one version per trained call, the version at its end.
    tito = json.loads(sample["metadata"])["tito"]
    assert tito["weight_versions"] == ["v7", "v8"]
    spans = tito["weight_version_spans"]
    assert [s["version"] for s in spans] == ["v7", "v7", "v8"]
    assert spans[-1]["end"] == len(sample["tokens"])
    assert spans[-1]["end"] - spans[-1]["start"] == outputs[1] - half


def _rows(tokens: list[int]) -> np.ndarray:
    """The routing of every input position of a call: ``[len(tokens) - 1, layers, topk]``."""
    return np.stack([routing(tokens[: i + 1]) for i in range(len(tokens) - 1)])


def _envelope(rows: np.ndarray) -> str:
    shape = "x".join(str(n) for n in rows.shape)
    return f"nrlre1:int16:{shape}:{base64.b64encode(rows.astype('<i2').tobytes()).decode()}"


def _rewrite(path: Path, change: Any) -> None:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.write_text("".join(json.dumps(change(line)) + "\n" for line in lines))


def test_nemo_gym_keeps_routed_experts_as_lists_or_envelopes_and_the_sampling_sent(tmp_path: Path) -> None:
    folder = tmp_path / "nemo-gym"
    shutil.copytree(SOURCES / "nemo-gym", folder)
    capture = folder / "capture"

    def with_rows(entry: dict[str, Any]) -> dict[str, Any]:
        rows = _rows(entry["prompt_token_ids"] + entry["generation_token_ids"])
        chat = entry["rollout_id"].startswith("rollout-chat")
        return {**entry, "routed_experts": rows.tolist() if chat else _envelope(rows)}

    def with_sampling(exchange: dict[str, Any]) -> dict[str, Any]:
        key = "max_tokens" if exchange.get("dialect", "chat") == "chat" else "max_output_tokens"
        return {**exchange, "request": {**exchange["request"], "temperature": 0.6, key: 512}}

    for tokens in capture.glob("*.tokens.jsonl"):
        _rewrite(tokens, with_rows)
    for exchanges in capture.glob("*.capture.jsonl"):
        _rewrite(exchanges, with_sampling)

    summary = import_traces("nemo-gym", [capture, folder / "rollouts.jsonl"], tmp_path / "log")
    assert summary.rejected == []
    assert not any("routed_experts" in note for s in summary.sessions for note in s.filled)
    turns = turns_of(tmp_path / "log")
    assert {s.session_id for s in summary.sessions} == {"rollout-chat-0", "rollout-responses-1"}
    assert all(t["routed_experts"] is not None for t in turns)
    assert {(t["routed_experts_layers"], t["routed_experts_topk"]) for t in turns} == {(LAYERS, TOPK)}
    for turn in turns:
        sampling = json.loads(turn["sampling"])
        assert sampling["temperature"] == 0.6
        assert 512 in (sampling.get("max_tokens"), sampling.get("max_output_tokens"))
    # A later call of a session stores only the rows its earlier calls did not (the writer's ledger).
    later = [t for t in turns if t["seq"] > 0]
    assert later and all(t["routed_experts_start"] > 0 for t in later)

    samples = _rebuild(tmp_path / "log", tmp_path / "samples.parquet", "--routed-experts")
    assert {s["session_id"] for s in samples} == {"rollout-chat-0", "rollout-responses-1"}
    for sample in samples:
        rows = np.array(sample["routed_experts"], dtype=np.int32).reshape(sample["routed_experts_shape"])
        check_rows(np.array(sample["tokens"]), rows)


PROMPT, OUTPUT = [1, 2, 5], [3, 2]


def _two_calls(tmp_path: Path, first: Any, second: Any) -> Path:
    """A NeMo Gym capture folder of rollout ``r``: two chat calls of the same ids, with these routed experts."""
    capture = tmp_path / "capture"
    capture.mkdir()
    base = {
        "schema_version": 1,
        "rollout_id": "r",
        "prompt_token_ids": PROMPT,
        "generation_token_ids": OUTPUT,
        "generation_log_probs": [-0.25, -0.5],
    }
    entries = [
        {**base, "model_call_id": "a", "routed_experts": first},
        {**base, "model_call_id": "b", "routed_experts": second},
    ]
    request = {"messages": [{"role": "user", "content": "hi"}]}
    response = {"choices": [{"message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}
    exchanges = [
        {"model_call_id": call, "dialect": "chat", "started_at": i, "request": request, "response": response}
        for i, call in enumerate("ab")
    ]
    (capture / "r.tokens.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    (capture / "r.capture.jsonl").write_text("".join(json.dumps(e) + "\n" for e in exchanges))
    return capture


def test_nemo_gym_routed_experts_that_fit_no_position_are_not_kept_and_the_session_still_imports(
    tmp_path: Path,
) -> None:
    # A row for every token (one more than the call's input positions): which rows are which is unknowable.
    capture = _two_calls(tmp_path, _rows([*PROMPT, *OUTPUT, 0]).tolist(), "nrlre1:int16:4x1x2:@@")
    summary = import_traces("nemo-gym", [capture], tmp_path / "log")
    assert summary.rejected == []
    [session] = summary.sessions
    assert "routed_experts: 5 rows for a call of 5 tokens (expected 4): not kept for the call" in session.filled
    assert "routed_experts: a string that is not an nrlre1 envelope: not kept for the call" in session.filled
    assert [t.get("routed_experts") for t in turns_of(tmp_path / "log")] == [None, None]


def test_openai_exchanges_keep_the_weight_versions_of_answers_and_streams(tmp_path: Path) -> None:
    source = tmp_path / "exchanges.jsonl"
    shutil.copy(SOURCES / "openai-exchanges" / "exchanges.jsonl", source)
    numbered = iter(range(100))

    def with_version(record: dict[str, Any]) -> dict[str, Any]:
        version = f"v{next(numbered)}"
        if "chunks" in record:
            # The version travels on a chunk (the last one reporting it counts: the call's end).
            chunks = [dict(c) for c in record["chunks"]]
            chunks[0]["metadata"] = {"weight_version": "stale"}
            chunks[-1]["metadata"] = {"weight_version": version}
            return {**record, "chunks": chunks, "request": {**record["request"], "temperature": 1.0}}
        return {**record, "response": {**record["response"], "metadata": {"weight_version": version}}}

    _rewrite(source, with_version)
    expected = {}
    for number, line in enumerate(source.read_text().splitlines()):
        record = json.loads(line)
        expected[number] = (f"v{number}", "chunks" in record)

    rewards = SOURCES / "openai-exchanges" / "rewards.jsonl"
    summary = import_traces(
        "openai-exchanges", [source], tmp_path / "log", rewards=rewards, session_header="X-Session-Id"
    )
    assert summary.rejected == []
    turns = turns_of(tmp_path / "log")
    versions = sorted(json.loads(t["weight_versions"])[0]["version"] for t in turns)
    assert versions == sorted(v for v, _ in expected.values())
    for turn in turns:
        [span] = json.loads(turn["weight_versions"])
        assert (span["start"], span["end"]) == (0, len(turn["output_ids"]))
    streamed = {v for v, chunks in expected.values() if chunks}
    for turn in turns:
        # Only the streamed requests sent a sampling parameter.
        want = {"temperature": 1.0} if json.loads(turn["weight_versions"])[0]["version"] in streamed else None
        assert (None if turn["sampling"] is None else json.loads(turn["sampling"])) == want

    samples = _rebuild(tmp_path / "log", tmp_path / "samples.parquet")
    assert sorted(v for s in samples for v in json.loads(s["metadata"])["tito"]["weight_versions"]) == versions


def test_openenv_keeps_the_call_kind_of_its_agent_and_auxiliary_rows(tmp_path: Path) -> None:
    folder = SOURCES / "openenv"
    summary = import_traces("openenv", [folder / "rollouts.jsonl"], tmp_path / "log", rewards=folder / "rewards.jsonl")
    assert summary.rejected == []
    turns = turns_of(tmp_path / "log")
    kinds = [(json.loads(t["metadata"])["call_kind"], t["call_kind"]) for t in turns]
    assert ("agent", "agent") in kinds and ("auxiliary", "auxiliary") in kinds
    # A discarded retry is neither an agent nor a side call: its kind stays unknown.
    assert all(column == (label if label != "discarded" else None) for label, column in kinds)

    everything = _rebuild(tmp_path / "log", tmp_path / "all.parquet")
    agents_only = _rebuild(tmp_path / "log", tmp_path / "agents.parquet", "--exclude-auxiliary")
    assert len(agents_only) < len(everything)


def test_provenance_that_breaks_the_write_contract_in_a_later_call_rejects_its_session_only(tmp_path: Path) -> None:
    source = tmp_path / "exchanges.jsonl"
    shutil.copy(SOURCES / "openai-exchanges" / "exchanges.jsonl", source)
    records = [json.loads(line) for line in source.read_text().splitlines()]
    # The second call of the first session with a response reports a span past its output.
    sid = next(r["session_id"] for r in records if "session_id" in r)
    index = [i for i, r in enumerate(records) if r.get("session_id") == sid][1]
    outputs = len(records[index]["response"]["choices"][0]["token_ids"])
    span = {"version": "v1", "start": 0, "end": outputs + 1}
    records[index]["response"] = {**records[index]["response"], "metadata": {"weight_versions": [span]}}
    source.write_text("".join(json.dumps(r) + "\n" for r in records))

    summary = import_traces("openai-exchanges", [source], tmp_path / "log", session_header="X-Session-Id")
    [reject] = summary.rejected
    assert (reject.session_id, reject.row) == (sid, index + 1)
    assert f"within the {outputs} output tokens" in reject.reason
    assert sid not in {s.session_id for s in summary.sessions} and summary.sessions
    assert {t["session_id"] for t in turns_of(tmp_path / "log")} == {s.session_id for s in summary.sessions}


def test_routed_experts_of_another_shape_than_the_sessions_earlier_calls_reject_the_session(tmp_path: Path) -> None:
    capture = _two_calls(tmp_path, np.zeros((4, 1, 2), dtype=int).tolist(), np.zeros((4, 2, 2), dtype=int).tolist())
    summary = import_traces("nemo-gym", [capture], tmp_path / "log")
    [reject] = summary.rejected
    assert (reject.session_id, reject.row) == ("r", 2)
    assert reject.reason == "routed_experts rows are 2 x 2, but earlier calls of the session have 1 x 2"
    assert summary.sessions == []
