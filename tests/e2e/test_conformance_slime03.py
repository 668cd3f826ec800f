"""The slime-0.3 corpus (SPEC §8), rebuilt through the real CLI with ``--policy slime-0.3``, equals its reference.

Every folder is checked field by field: tokens, loss mask, logprobs,
response length, reward, the three flags, rollout_id where the corpus gives
it, and the samples left out by ``--max-sample-tokens`` (notes.jsonl), in
this process, with two worker processes, and on Ray (tests/run/test_ray.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import (
    CONFORMANCE_SLIME03,
    REPO,
    assert_copy_matches_shared,
    conformance_folders,
    read_jsonl,
)
from tests.support.slime03 import assert_matches_reference, folder_log
from tito_cli.errors import EXIT_OK

SHARED = REPO.parent / "shared" / "spec" / "conformance-slime03"
FOLDERS = conformance_folders(CONFORMANCE_SLIME03)


def test_corpus_is_present() -> None:
    assert len(FOLDERS) == 13
    sessions = {e["session_id"] for f in FOLDERS for e in read_jsonl(f / "expected.jsonl")}
    assert len(sessions) == 180
    assert len([s for s in sessions if s.startswith("s03case-")]) == 30


def test_copy_matches_the_shared_corpus() -> None:
    """The project's copy equals ../shared/spec/conformance-slime03; without ../shared only outside CI."""
    assert_copy_matches_shared(CONFORMANCE_SLIME03, SHARED)


def rebuild(args: list[str]) -> str:
    result = tito("rebuild", *args)
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
