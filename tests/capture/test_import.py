"""``tito import``: each format's fixture, the openai-exchanges round trip, and the broken cases.

The fixtures (``tests/import_sources/<format>/``, written by ``make.py`` from
each format's documented schema) come with their ground truth: the ids each
call saw and generated and the messages around it.  A fixture passes when its
import rebuilds to the samples the spec's literal model (``spec_model.py``)
gives for that ground truth.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE, read_jsonl, write_log
from tests.support.imports import CASES, SOURCES, turns_of
from tests.support.spec_model import model_rebuild
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.capture.importing import import_traces
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTPUT, EXIT_REJECTED, OutputError, SourceError
from tito_cli.export.openai_exchanges import export_exchanges
from tito_cli.run.rebuild import rebuild

#: Per format: the source arguments (relative to its folder) and import options.
FIXTURES: dict[str, tuple[list[str], dict[str, Any]]] = {
    "openai-exchanges": (["exchanges.jsonl"], {"rewards": "rewards.jsonl", "session_header": "X-Session-Id"}),
    "verifiers": (["rollouts"], {}),
    "atif": (["trajectories"], {"rewards": "rewards.jsonl"}),
    "nemo-gym": (["capture", "rollouts.jsonl"], {}),
    "openenv": (["rollouts.jsonl"], {"rewards": "rewards.jsonl"}),
}


def run_import(fmt: str, folder: Path, sources: list[str], options: dict[str, Any], out: Path) -> Any:
    opts = dict(options)
    if "rewards" in opts:
        opts["rewards"] = folder / opts["rewards"]
    return import_traces(fmt, [folder / s for s in sources], out, **opts)


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
def test_each_fixture_rebuilds_to_the_spec_models_samples_of_its_ground_truth(fmt: str, tmp_path: Path) -> None:
    folder = SOURCES / fmt
    sources, options = FIXTURES[fmt]
    summary = run_import(fmt, folder, sources, options, tmp_path / "log")
    truth = read_jsonl(folder / "expected_turns.jsonl")
    rewards = {r["session_id"]: r["reward"] for r in read_jsonl(folder / "expected_sessions.jsonl")}
    assert summary.rejected == []
    assert sorted((s.session_id, s.turns) for s in summary.sessions) == sorted(
        (sid, sum(t["session_id"] == sid for t in truth)) for sid in rewards
    )
    assert summary.sessions_without_reward == 0

    # The turns, field by field.
    got = turns_of(tmp_path / "log")
    want = sorted(truth, key=lambda t: (t["session_id"], t["seq"]))
    assert [(t["session_id"], t["seq"]) for t in got] == [(t["session_id"], t["seq"]) for t in want]
    for g, w in zip(got, want, strict=True):
        where = (w["session_id"], w["seq"])
        assert g["prompt_ids"] == w["prompt_ids"], where
        assert g["output_ids"] == w["output_ids"], where
        assert g["output_logprobs"] == w["output_logprobs"], where
        assert g["finish_reason"] == w["finish_reason"], where
        assert json.loads(g["prompt_messages"]) == w["prompt_messages"], where
        assert json.loads(g["response_message"]) == w["response_message"], where
        assert (None if g["tools"] is None else json.loads(g["tools"])) == w["tools"], where

    # The samples.
    result = rebuild([tmp_path / "log"], tmp_path / "samples.parquet", workers=1)
    assert result.rejected == []
    samples = pq.read_table(tmp_path / "samples.parquet").to_pylist()
    for sid, reward in rewards.items():
        turns = [SimpleNamespace(**t) for t in truth if t["session_id"] == sid]
        expected = model_rebuild(turns, 1024, reward, "split")
        mine = [s for s in samples if s["session_id"] == sid]
        assert expected, sid
        assert [s["tokens"] for s in mine] == [e.tokens for e in expected], sid
        assert [s["loss_mask"] for s in mine] == [e.loss_mask for e in expected], sid
        assert [s["rollout_log_probs"] for s in mine] == [e.rollout_log_probs for e in expected], sid
        assert [s["reward"] for s in mine] == pytest.approx([e.reward for e in expected]), sid


def test_what_each_format_lacks_is_reported_per_session(tmp_path: Path) -> None:
    folder = SOURCES / "atif"
    summary = run_import("atif", folder, ["trajectories"], {"rewards": "rewards.jsonl"}, tmp_path / "log")
    notes = dict(summary.filled_counts())
    assert notes["finish_reason: not in ATIF: recorded as 'stop'"] == 2
    assert notes["tools: ATIF keeps no tool schema: recorded as none"] == 2
    report = read_jsonl(tmp_path / "log" / "import-report.jsonl")
    assert [(r["session_id"], r["status"], r["turns"], r["reward_from"]) for r in report] == [
        ("atif-chat", "imported", 2, "rewards file"),
        ("atif-tools", "imported", 2, "rewards file"),
    ]
    # Without --rewards the sessions get no sessions row, and the summary says so.
    summary = import_traces("atif", [folder / "trajectories"], tmp_path / "bare")
    assert summary.sessions_without_reward == 2
    assert not list((tmp_path / "bare").glob("sessions-*.parquet"))


def test_responses_are_aligned_to_what_the_harness_sent_back_unless_asked_to_keep_them(tmp_path: Path) -> None:
    folder = SOURCES / "openai-exchanges"
    options = {**FIXTURES["openai-exchanges"][1], "align_responses": False}
    summary = run_import("openai-exchanges", folder, ["exchanges.jsonl"], options, tmp_path / "verbatim")
    assert not any("response messages" in note for s in summary.sessions for note in s.filled)
    first = turns_of(tmp_path / "verbatim")[0]  # sglang-chat, seq 0
    assert json.loads(first["response_message"]) == {
        "role": "assistant",
        "content": "Seven.",
        "refusal": None,
        "tool_calls": [],
    }
    summary = run_import(
        "openai-exchanges", folder, ["exchanges.jsonl"], FIXTURES["openai-exchanges"][1], tmp_path / "aligned"
    )
    notes = dict(summary.filled_counts())
    key = "response messages: the server's replaced by the equal message the harness sent back (null fields dropped)"
    assert notes[key] == 2  # the vLLM and SGLang sessions; the streamed one has no null fields
    assert json.loads(turns_of(tmp_path / "aligned")[0]["response_message"]) == {
        "role": "assistant",
        "content": "Seven.",
    }
    # Aligned, the turns route as one conversation: one sample per session, no rewrite absorbed.
    rebuilt = rebuild([tmp_path / "aligned"], tmp_path / "a.parquet", workers=1)
    kept = rebuild([tmp_path / "verbatim"], tmp_path / "v.parquet", workers=1)
    assert rebuilt.totals.rewrite_merges == 0 and kept.totals.rewrite_merges == 2
    assert rebuilt.totals.trained_tokens > kept.totals.trained_tokens


@pytest.mark.parametrize("folder", ["cases-threshold-1024", "random-threshold-1024", "random-threshold-2"])
def test_a_log_exported_to_openai_exchanges_and_imported_back_rebuilds_byte_identically(
    folder: str, tmp_path: Path
) -> None:
    source = CONFORMANCE / folder
    write_log(
        tmp_path / "log", read_jsonl(source / "turns.jsonl"), read_jsonl(source / "sessions.jsonl"), tokenizer="tok"
    )
    exported = export_exchanges([tmp_path / "log"], tmp_path / "ex.jsonl", rewards_out=tmp_path / "rewards.jsonl")
    summary = import_traces(
        "openai-exchanges",
        [tmp_path / "ex.jsonl"],
        tmp_path / "back",
        rewards=tmp_path / "rewards.jsonl",
        tokenizer="tok",
    )
    assert summary.rejected == [] and summary.turns == exported.turns
    threshold = int(folder.rsplit("-", 1)[1])
    policy = SlimeV4(fork_threshold=threshold)
    original = rebuild([tmp_path / "log"], tmp_path / "a.parquet", policy, workers=1)
    back = rebuild([tmp_path / "back"], tmp_path / "b.parquet", policy, workers=1)
    # Sessions the rebuild rejects (the corpus holds invalid ones on purpose) are left out of the export.
    assert [r.session_id for r in exported.rejected] == [r.session_id for r in original.rejected]
    assert back.rejected == [] and back.sessions == original.sessions > 0
    digest = [hashlib.sha256((tmp_path / n).read_bytes()).hexdigest() for n in ("a.parquet", "b.parquet")]
    assert digest[0] == digest[1]


def test_the_commands_import_export_and_rebuild_from_agree(tmp_path: Path) -> None:
    folder = SOURCES / "openai-exchanges"
    args = ["--rewards", str(folder / "rewards.jsonl"), "--session-header", "X-Session-Id"]
    done = tito("import", "openai-exchanges", str(folder / "exchanges.jsonl"), "--out", str(tmp_path / "log"), *args)
    assert done.exit_code == EXIT_OK, done.output
    lines = [" ".join(line.split()) for line in done.output.splitlines()]
    assert lines[:4] == [
        "sessions imported 3",
        "turns 6",
        "sessions without a reward (no sessions row) 0",
        "rejected sessions 0",
    ]
    # The output folder holds a log now: replacing it needs --overwrite.
    again = tito("import", "openai-exchanges", str(folder / "exchanges.jsonl"), "--out", str(tmp_path / "log"))
    assert again.exit_code == EXIT_OUTPUT
    done = tito("rebuild", str(tmp_path / "log"), "--out", str(tmp_path / "a.parquet"), "-j", "1")
    assert done.exit_code == EXIT_OK, done.output
    exchanges = str(folder / "exchanges.jsonl")
    done = tito("rebuild", "--from", "openai-exchanges", exchanges, "--out", tmp_path / "b.parquet", "-j", "1", *args)
    assert done.exit_code == EXIT_OK, done.output
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert not [p for p in tmp_path.iterdir() if ".import-" in p.name]  # the temporary log is gone
    done = tito(
        "export-exchanges", tmp_path / "log", "--out", tmp_path / "ex.jsonl", "--rewards-out", tmp_path / "r.jsonl"
    )
    assert done.exit_code == EXIT_OK, done.output
    assert len(read_jsonl(tmp_path / "ex.jsonl")) == 6 and len(read_jsonl(tmp_path / "r.jsonl")) == 3


def test_an_unreadable_source_is_an_error_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such file"):
        import_traces("atif", [tmp_path / "missing.json"], tmp_path / "log")
    (tmp_path / "not.db").write_text("not sqlite")
    with pytest.raises(SourceError, match="not an rLLM gateway trace store"):
        import_traces("rllm", [tmp_path / "not.db"], tmp_path / "log2")
    assert not (tmp_path / "log").exists() and not (tmp_path / "log2").exists()
    bad_rewards = tmp_path / "rewards.jsonl"
    bad_rewards.write_text('{"session_id": "a", "reward": "high"}\n')
    with pytest.raises(SourceError, match="reward must be a finite number") as info:
        import_traces("atif", [SOURCES / "atif" / "trajectories"], tmp_path / "log3", rewards=bad_rewards)
    assert (info.value.file, info.value.row) == (str(bad_rewards), 1)
    # A source found unreadable after sessions were imported from the ones before it: nothing is left.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(SourceError, match=r"no traces\.jsonl under this folder"):
        import_traces("verifiers", [SOURCES / "verifiers" / "rollouts", empty], tmp_path / "log5")
    assert not (tmp_path / "log5").exists()
    done = tito("import", "atif", str(tmp_path / "missing.json"), "--out", str(tmp_path / "log4"))
    assert done.exit_code == EXIT_BAD_INPUT
    (tmp_path / "file").write_text("")
    with pytest.raises(OutputError, match="is not a folder"):
        import_traces("atif", [SOURCES / "atif" / "trajectories"], tmp_path / "file")


def test_the_shipped_rllm_store_written_by_the_real_gateway_imports_whole(tmp_path: Path) -> None:
    folder = SOURCES / "rllm"
    summary = import_traces("rllm", [folder / "traces.db"], tmp_path / "log", rewards=folder / "rewards.jsonl")
    assert summary.rejected == []
    assert {s.session_id: s.turns for s in summary.sessions} == {
        "tool-session": 2,
        "retry-session": 3,
        "stream-session": 2,
    }
    assert summary.sessions_without_reward == 0


def test_a_turn_the_capture_writer_refuses_rejects_its_session_and_the_rest_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tito_cli.capture.writer import TurnLogWriter

    original = TurnLogWriter.record_turn

    def strict(self: TurnLogWriter, session_id: str, *args: Any, **kwargs: Any) -> int:
        if session_id == "sglang-chat":
            raise ValueError("session ids must not contain a dash followed by 'chat'")
        return original(self, session_id, *args, **kwargs)

    monkeypatch.setattr(TurnLogWriter, "record_turn", strict)
    folder = SOURCES / "openai-exchanges"
    summary = run_import(
        "openai-exchanges", folder, ["exchanges.jsonl"], FIXTURES["openai-exchanges"][1], tmp_path / "log"
    )
    assert sorted(s.session_id for s in summary.sessions) == ["streamed-chat", "vllm-tools"]
    [refused] = summary.rejected
    assert (refused.session_id, refused.file, refused.row) == ("sglang-chat", str(folder / "exchanges.jsonl"), 3)
    assert refused.reason.startswith("the capture writer refused the turn: session ids must not")
    assert {t["session_id"] for t in turns_of(tmp_path / "log")} == {"streamed-chat", "vllm-tools"}


def case_folders() -> list[Path]:
    return sorted(p for p in CASES.iterdir() if (p / "case.json").is_file())


@pytest.mark.parametrize("case", case_folders(), ids=lambda p: p.name)
def test_import_case(case: Path, tmp_path: Path) -> None:
    """A scenario folder: its sources, and what ``case.json`` says is imported, rejected (file, row, reason), noted."""
    spec = json.loads((case / "case.json").read_text())
    options = {k: (case / v if k == "rewards" else v) for k, v in spec.get("options", {}).items()}
    summary = import_traces(spec["format"], [case / s for s in spec["sources"]], tmp_path / "log", **options)
    assert {s.session_id: s.turns for s in summary.sessions} == spec["imported"]
    rejected = [
        {
            "session_id": r.session_id,
            "file": None if r.file is None else Path(r.file).relative_to(case).as_posix(),
            "row": r.row,
            "reason": r.reason,
        }
        for r in summary.rejected
    ]
    assert rejected == spec["rejected"]
    for sid, notes in spec.get("filled", {}).items():
        [session] = [s for s in summary.sessions if s.session_id == sid]
        assert session.filled == notes
    # Everything else is written, and the rejects are in the report.
    report = read_jsonl(tmp_path / "log" / "import-report.jsonl")
    assert sorted(r["session_id"] for r in report if r["status"] == "rejected") == sorted(
        r["session_id"] for r in spec["rejected"]
    )
    if spec["imported"]:
        result = rebuild([tmp_path / "log"], tmp_path / "samples.parquet", workers=1)
        assert result.rejected == []
        assert sorted({s["session_id"] for s in pq.read_table(tmp_path / "samples.parquet").to_pylist()}) == sorted(
            sid for sid in spec["imported"] if sid not in spec.get("without_samples", [])
        )
    # The command exits with the "rejected" code when a session was rejected, after writing the rest.
    args = ["import", spec["format"], *[str(case / s) for s in spec["sources"]], "--out", str(tmp_path / "cli")]
    for key, value in spec.get("options", {}).items():
        args += [f"--{key.replace('_', '-')}", str(case / value) if key == "rewards" else value]
    done = tito(*args)
    assert done.exit_code == (EXIT_REJECTED if spec["rejected"] else EXIT_OK), done.output


def test_responses_items_project_onto_chat_messages_the_same_way_as_output_and_as_input() -> None:
    from tito_cli.capture.importers.nemo_gym import responses_messages

    output = [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "look first"}]},
        {"type": "function_call", "call_id": "c1", "name": "read", "arguments": '{"p": "a"}'},
        {"type": "function_call", "call_id": "c2", "name": "read", "arguments": '{"p": "b"}'},
    ]
    assistant = {
        "role": "assistant",
        "content": "",
        "reasoning_content": "look first",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": '{"p": "a"}'}},
            {"id": "c2", "type": "function", "function": {"name": "read", "arguments": '{"p": "b"}'}},
        ],
    }
    assert responses_messages(output) == [assistant]
    # The same items sent back in the next request, between the user turn and the tool results.
    sent = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        *output,
        {"type": "function_call_output", "call_id": "c1", "output": "A"},
        {"type": "function_call_output", "call_id": "c2", "output": "B"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ]
    assert responses_messages(sent) == [
        {"role": "user", "content": "go"},
        assistant,
        {"role": "tool", "tool_call_id": "c1", "content": "A"},
        {"role": "tool", "tool_call_id": "c2", "content": "B"},
        {"role": "assistant", "content": "done"},
    ]


def test_a_streamed_tool_call_is_reassembled_from_its_deltas(tmp_path: Path) -> None:
    def chunk(delta: dict[str, Any], ids: list[int], finish: str | None = None, **root: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "token_ids": ids, "finish_reason": finish}
        choice["logprobs"] = {"content": [{"token": f"token_id:{i}", "logprob": -0.5} for i in ids]}
        return {"object": "chat.completion.chunk", "choices": [choice], **root}

    call = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "grep", "arguments": ""}}
    chunks = [
        chunk({"role": "assistant", "content": ""}, [], prompt_token_ids=[1, 2, 3]),
        chunk({"reasoning_content": "need to "}, [4]),
        chunk({"reasoning_content": "search"}, [5]),
        chunk({"tool_calls": [call]}, [6]),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}, [7]),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}, [8, 2], "tool_calls"),
    ]
    record = {"session_id": "s", "request": {"messages": [{"role": "user", "content": "find x"}], "stream": True}}
    (tmp_path / "ex.jsonl").write_text(json.dumps({**record, "chunks": chunks}) + "\n")
    summary = import_traces("openai-exchanges", [tmp_path / "ex.jsonl"], tmp_path / "log")
    assert summary.rejected == []
    [turn] = turns_of(tmp_path / "log")
    assert (turn["prompt_ids"], turn["output_ids"], turn["finish_reason"]) == (
        [1, 2, 3],
        [4, 5, 6, 7, 8, 2],
        "tool_calls",
    )
    assert turn["output_logprobs"] == [-0.5] * 6
    assert json.loads(turn["response_message"]) == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "need to search",
        "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "grep", "arguments": '{"q": "x"}'}}],
    }


def test_a_rewards_file_fills_every_sessions_column(tmp_path: Path) -> None:
    rewards = tmp_path / "rewards.jsonl"
    rows = [
        {
            "session_id": "atif-tools",
            "reward": 2.0,
            "index": 7,
            "group_index": 1,
            "label": "solved",
            "metadata": {"k": 1},
            "rollout_id": 41,
        },
        {"session_id": "atif-chat", "reward": None},
        {"session_id": "not-imported", "reward": 1.0},
    ]
    rewards.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = import_traces("atif", [SOURCES / "atif" / "trajectories"], tmp_path / "log", rewards=rewards)
    assert summary.unused_rewards == ["not-imported"]
    [table] = [pq.read_table(p).to_pylist() for p in (tmp_path / "log").glob("sessions-*.parquet")]
    by_id = {r["session_id"]: r for r in table}
    assert by_id["atif-tools"] == {
        "session_id": "atif-tools",
        "reward": 2.0,
        "index": 7,
        "group_index": 1,
        "label": "solved",
        "metadata": '{"k": 1}',
        "rollout_id": 41,
    }
    assert by_id["atif-chat"]["reward"] is None


def test_an_anthropic_messages_exchange_maps_its_system_content_blocks_and_stop_reason(tmp_path: Path) -> None:
    capture = tmp_path / "capture"
    capture.mkdir()
    entry = {
        "schema_version": 3,
        "rollout_id": "r",
        "model_call_id": "c",
        "prompt_token_ids": [1, 2],
        "generation_token_ids": [3, 2],
        "generation_log_probs": [-0.25, -0.5],
    }
    blocks = [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t1", "name": "ls", "input": {}}]
    exchange = {
        "model_call_id": "c",
        "dialect": "messages",
        "started_at": 1.0,
        "request": {"system": "be brief", "messages": [{"role": "user", "content": "list"}]},
        "response": {"type": "message", "role": "assistant", "content": blocks, "stop_reason": "tool_use"},
    }
    (capture / "r.tokens.jsonl").write_text(json.dumps(entry) + "\n")
    (capture / "r.capture.jsonl").write_text(json.dumps(exchange) + "\n")
    summary = import_traces("nemo-gym", [capture], tmp_path / "log")
    assert summary.rejected == [] and summary.sessions_without_reward == 1
    [turn] = turns_of(tmp_path / "log")
    assert json.loads(turn["prompt_messages"]) == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "list"},
    ]
    assert json.loads(turn["response_message"]) == {"role": "assistant", "content": blocks}
    assert turn["finish_reason"] == "tool_calls"


def test_a_sessions_row_the_writer_refuses_rejects_its_session_whole(tmp_path: Path) -> None:
    """A rewards line whose metadata uses the reserved "tito" key: that session is rejected before any of
    its turns is buffered (it used to stop the import with an internal error); the others import."""
    folder = SOURCES / "openai-exchanges"
    rewards = read_jsonl(folder / "rewards.jsonl")
    refused = rewards[0]["session_id"]
    rewards[0]["metadata"] = {"tito": "mine"}
    rewards_file = tmp_path / "rewards.jsonl"
    rewards_file.write_text("".join(json.dumps(r) + "\n" for r in rewards), encoding="utf-8")
    summary = import_traces(
        "openai-exchanges",
        [folder / "exchanges.jsonl"],
        tmp_path / "log",
        rewards=rewards_file,
        session_header="X-Session-Id",
    )
    assert [r.session_id for r in summary.rejected] == [refused]
    assert "which tito reserves for each sample's provenance" in summary.rejected[0].reason
    imported = {s.session_id for s in summary.sessions}
    assert refused not in imported and imported == {r["session_id"] for r in rewards} - {refused}
    assert refused not in {row["session_id"] for row in turns_of(tmp_path / "log")}
