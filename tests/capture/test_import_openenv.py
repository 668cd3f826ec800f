"""``tito import openenv``: rollout documents written by OpenEnv's own capture code import, rebuild and export.

``tests/import_sources/openenv/rollouts.jsonl`` was made by OpenEnv 0.10.0's ``RolloutGraph`` and
``export_session`` (``tests/import_sources/make_openenv.py`` records the command): a tool-using
agent whose first call was retried (OpenEnv labels the abandoned call ``discarded``), a toolless
title generator beside it (``auxiliary``), and a chat.  Every call must come back as a turn, in
arrival order, with the ids, logprobs and messages it was captured with and OpenEnv's label as its
``call_kind``; the log must rebuild to the spec model's samples of that truth, under ``--policy
trl`` to TRL's own reconciler's rows, and ``tito export --to trl`` must take the result.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq

from tests.support.cli import tito
from tests.support.helpers import read_jsonl
from tests.support.imports import turns_of
from tests.support.spec_model import model_rebuild
from tests.support.trl_oracle import chain_to_sequences
from tito_cli.capture.importing import import_traces
from tito_cli.errors import EXIT_OK
from tito_cli.run.rebuild import rebuild

FIXTURE = Path(__file__).resolve().parent.parent / "import_sources" / "openenv"
REWARDS = {"openenv-agent": 1.0, "openenv-chat": 0.25}


def imported(tmp_path: Path) -> Path:
    summary = import_traces(
        "openenv", [FIXTURE / "rollouts.jsonl"], tmp_path / "log", rewards=FIXTURE / "rewards.jsonl"
    )
    assert summary.rejected == []
    assert [(s.session_id, s.turns) for s in summary.sessions] == [("openenv-agent", 4), ("openenv-chat", 2)]
    return tmp_path / "log"


def test_every_call_is_a_turn_with_its_label(tmp_path: Path) -> None:
    log = imported(tmp_path)
    truth = read_jsonl(FIXTURE / "expected_turns.jsonl")
    rows = sorted(turns_of(log), key=lambda r: (r["session_id"], r["seq"]))
    assert len(rows) == len(truth)
    for row, expected in zip(rows, sorted(truth, key=lambda t: (t["session_id"], t["seq"])), strict=True):
        where = f"{expected['session_id']} seq {expected['seq']}"
        assert (row["session_id"], row["seq"]) == (expected["session_id"], expected["seq"]), where
        assert row["prompt_ids"] == expected["prompt_ids"], where
        assert row["output_ids"] == expected["output_ids"], where
        assert row["output_logprobs"] == expected["output_logprobs"], where
        assert json.loads(row["prompt_messages"]) == expected["prompt_messages"], where
        assert json.loads(row["response_message"]) == expected["response_message"], where
        assert json.loads(row["metadata"])["call_kind"] == expected["call_kind"], where
    kinds = [json.loads(r["metadata"])["call_kind"] for r in rows if r["session_id"] == "openenv-agent"]
    assert kinds == ["discarded", "agent", "auxiliary", "agent"]


def test_the_import_rebuilds_to_the_spec_models_samples_and_exports_to_trl(tmp_path: Path) -> None:
    log = imported(tmp_path)
    result = rebuild([log], tmp_path / "samples.parquet", workers=1)
    assert result.rejected == []
    samples = pq.read_table(tmp_path / "samples.parquet").to_pylist()
    truth = read_jsonl(FIXTURE / "expected_turns.jsonl")
    for sid, reward in REWARDS.items():
        turns = [SimpleNamespace(**t) for t in truth if t["session_id"] == sid]
        expected = model_rebuild(turns, 1024, reward, "split")
        mine = [s for s in samples if s["session_id"] == sid]
        assert [s["tokens"] for s in mine] == [e.tokens for e in expected], sid
        assert [s["loss_mask"] for s in mine] == [e.loss_mask for e in expected], sid
        assert [s["rollout_log_probs"] for s in mine] == [e.rollout_log_probs for e in expected], sid

    done = tito("export", str(tmp_path / "samples.parquet"), "--to", "trl", "--out", str(tmp_path / "trl.parquet"))
    assert done.exit_code == EXIT_OK, done.output
    exported = pq.read_table(tmp_path / "trl.parquet").to_pylist()
    assert [row["input_ids"] for row in exported] == [s["tokens"] for s in samples]


def test_policy_trl_on_the_import_equals_trls_reconciler(tmp_path: Path) -> None:
    log = imported(tmp_path)
    done = tito("rebuild", str(log), "--out", str(tmp_path / "s.parquet"), "--policy", "trl")
    assert done.exit_code == EXIT_OK, done.output
    samples = pq.read_table(tmp_path / "s.parquet").to_pylist()
    for sid in REWARDS:
        calls = [
            (t["prompt_ids"], t["output_ids"], t["output_logprobs"])
            for t in read_jsonl(FIXTURE / "expected_turns.jsonl")
            if t["session_id"] == sid
        ]
        rows, _ = chain_to_sequences(calls, 1024)
        assert [s["tokens"] for s in samples if s["session_id"] == sid] == [r.input_ids for r in rows], sid
