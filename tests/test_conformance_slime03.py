"""The slime-0.3 corpus (SPEC §8), rebuilt through the real CLI with ``--policy slime-0.3``, equals its reference.

Every folder is checked field by field: tokens, loss mask, logprobs,
response length, reward, the three flags, rollout_id where the corpus gives
it, and the samples left out by ``--max-sample-tokens`` (notes.jsonl), in
this process, with two worker processes, and on Ray (tests/test_ray.py).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tito_cli.cli import app
from tito_cli.errors import EXIT_OK

from .helpers import CONFORMANCE_SLIME03, REPO, conformance_folders, read_jsonl, write_log

SHARED = REPO.parent / "shared" / "spec" / "conformance-slime03"
FOLDERS = conformance_folders(CONFORMANCE_SLIME03)
FLAGS = ("truncated", "use_tool", "ill_formed")


def test_corpus_is_present() -> None:
    assert len(FOLDERS) == 13
    sessions = {e["session_id"] for f in FOLDERS for e in read_jsonl(f / "expected.jsonl")}
    assert len(sessions) == 180
    assert len([s for s in sessions if s.startswith("s03case-")]) == 30


def test_copy_matches_the_shared_corpus() -> None:
    """The project's copy equals ../shared/spec/conformance-slime03; without ../shared only outside CI."""
    if not SHARED.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"{SHARED} is missing: CI must check the copy against the shared corpus")
        pytest.skip(f"{SHARED} is not beside the repository")
    mine = {p.relative_to(CONFORMANCE_SLIME03): p.read_bytes() for p in CONFORMANCE_SLIME03.rglob("*") if p.is_file()}
    theirs = {p.relative_to(SHARED): p.read_bytes() for p in SHARED.rglob("*") if p.is_file()}
    assert mine == theirs


def folder_log(folder: Path, logs: Path) -> list[str]:
    """The folder's turns written as a log (spread over files), and the CLI options of its run."""
    # Several small flushes, so each session's turns are spread over files.  The writer keeps
    # the message JSON's number types (json.dumps writes 1.0 as 1.0): the identity cases need them.
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    options = ["--policy", "slime-0.3", "--fork-threshold", (folder / "threshold").read_text().strip()]
    cap = folder / "max_sample_tokens"
    if cap.is_file():
        options += ["--max-sample-tokens", cap.read_text().strip()]
    return options


def assert_matches_reference(folder: Path, rows: list[dict[str, Any]], summary: str) -> None:
    """Samples rows (in file order) and the CLI's summary against the folder's expected outputs."""
    got: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        got.setdefault(row["session_id"], []).append(row)
    expected = {e["session_id"]: e["samples"] for e in read_jsonl(folder / "expected.jsonl")}
    assert sorted(got) == sorted(sid for sid, samples in expected.items() if samples)
    assert [r["session_id"] for r in rows] == sorted(r["session_id"] for r in rows)
    for sid, samples in expected.items():
        mine = got.get(sid, [])
        assert len(mine) == len(samples), sid
        for i, (a, e) in enumerate(zip(mine, samples, strict=True)):
            where = f"{sid} sample {i}"
            assert a["sample_index"] == i, where
            assert a["tokens"] == e["tokens"], where
            assert a["response_length"] == e["response_length"], where
            assert a["loss_mask"] == e["loss_mask"], where
            assert a["rollout_log_probs"] == np.asarray(e["rollout_log_probs"], np.float32).tolist(), where
            assert a["reward"] == e["reward"], where
            metadata = json.loads(a["metadata"])
            assert {k: metadata[k] for k in FLAGS} == e["metadata"], where
            assert set(metadata) == {*FLAGS, "tito"}, where  # provenance kept, nothing else added
            if "rollout_id" in e:
                assert a["rollout_id"] == e["rollout_id"], where
            else:  # the random sessions: always the index
                sessions = {s["session_id"]: s for s in read_jsonl(folder / "sessions.jsonl")}
                assert a["rollout_id"] == sessions[sid]["index"], where

    # Samples the reference emits with a negative response_length are left out and reported.
    notes = read_jsonl(folder / "notes.jsonl")
    left_out = sum(n["left_out_samples"] for n in notes)
    row = re.search(r"left out \(first prompt > (\d+) tokens\)\s+(\d+)", summary)
    if not notes:
        assert row is None, summary
        return
    assert row is not None, summary
    assert row.group(1) == (folder / "max_sample_tokens").read_text().strip()
    assert int(row.group(2)) == left_out
    for note in notes:
        k = note["left_out_samples"]
        assert f"{note['session_id']}: left out {k} sample{'s' if k > 1 else ''}: first prompt longer than" in summary


def rebuild(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["rebuild", *args])
    assert result.exit_code == EXIT_OK, result.output
    return result.stderr


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_folder_matches_reference(folder: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    options = folder_log(folder, logs)
    out = tmp_path / "samples.parquet"
    summary = rebuild([str(logs), "--out", str(out), "--workers", "1", *options])
    assert read_jsonl(out.with_name(out.name + ".rejects.jsonl")) == []
    assert_matches_reference(folder, pq.read_table(out).to_pylist(), summary)
    policy = json.loads(pq.read_schema(out).metadata[b"tito.policy"])
    assert policy["name"] == "slime-0.3" and policy["reward_mode"] == "full"


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_two_workers_write_the_same_bytes(folder: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    options = folder_log(folder, logs)
    one, two = tmp_path / "one.parquet", tmp_path / "two.parquet"
    rebuild([str(logs), "--out", str(one), "--workers", "1", *options])
    # Batches of (about) one byte: every session is a batch of its own, rebuilt in a worker process.
    summary = rebuild([str(logs), "--out", str(two), "--workers", "2", "--batch-mb", "0.000001", *options])
    assert two.read_bytes() == one.read_bytes()
    assert_matches_reference(folder, pq.read_table(two).to_pylist(), summary)
