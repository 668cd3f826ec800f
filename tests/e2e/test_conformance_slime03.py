"""The slime-0.3 corpus (SPEC §8), rebuilt through the real CLI with ``--policy slime-0.3``, equals its reference.

Every folder is checked field by field: tokens, loss mask, logprobs,
response length, reward, the three flags, rollout_id where the corpus gives
it, and the samples left out by ``--max-sample-tokens`` (notes.jsonl), in
this process, with two worker processes, and on Ray (tests/test_ray.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tito_cli.cli import app
from tito_cli.errors import EXIT_OK

from .helpers import (
    CONFORMANCE_SLIME03,
    REPO,
    assert_copy_matches_shared,
    assert_samples_match_expected,
    conformance_folders,
    conformance_log,
    read_jsonl,
)

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
    assert_copy_matches_shared(CONFORMANCE_SLIME03, SHARED)


def folder_log(folder: Path, logs: Path) -> list[str]:
    """The folder's turns written as a log (spread over files), and the CLI options of its run."""
    return ["--policy", "slime-0.3", *conformance_log(folder, logs)]


def assert_matches_reference(folder: Path, rows: list[dict[str, Any]], summary: str) -> None:
    """Samples rows (in file order) and the CLI's summary against the folder's expected outputs."""
    sessions = {s["session_id"]: s for s in read_jsonl(folder / "sessions.jsonl")}

    def check_flags_and_rollout_id(row: dict[str, Any], expected: dict[str, Any], where: str) -> None:
        metadata = json.loads(row["metadata"])
        assert {k: metadata.get(k) for k in FLAGS} == expected["metadata"], where
        assert set(metadata) == {*FLAGS, "tito"}, where  # provenance kept, nothing else added
        if "rollout_id" in expected:
            assert row["rollout_id"] == expected["rollout_id"], where
        else:  # the random sessions: always the index
            assert row["rollout_id"] == sessions[row["session_id"]]["index"], where

    assert_samples_match_expected(folder, rows, check_flags_and_rollout_id)

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
