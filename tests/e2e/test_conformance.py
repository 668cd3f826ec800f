"""Every conformance folder, rebuilt through the real CLI, must equal the reference's output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE as CONFORMANCE_COPY
from tests.support.helpers import (
    REPO,
    assert_copy_matches_shared,
    assert_samples_match_expected,
    conformance_folders,
    conformance_log,
    read_jsonl,
)
from tito_cli.errors import EXIT_OK, EXIT_REJECTED

CONFORMANCE_SHARED = REPO.parent / "shared" / "conformance"

FOLDERS = conformance_folders()


def test_corpus_is_present() -> None:
    assert len(FOLDERS) >= 11
    total = sum(len(read_jsonl(f / "expected.jsonl")) for f in FOLDERS)
    assert total == 185


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_folder_matches_reference(folder: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    options = conformance_log(folder, logs)
    out = tmp_path / "samples.parquet"

    result = tito("rebuild", str(logs), "--out", str(out), *options)

    expected_rejects = {r["session_id"]: r["reason"] for r in read_jsonl(folder / "rejects.jsonl")}
    assert result.exit_code == (EXIT_REJECTED if expected_rejects else EXIT_OK), result.output
    rejects = read_jsonl(out.with_name(out.name + ".rejects.jsonl"))
    assert {r["session_id"] for r in rejects} == set(expected_rejects)
    for r in rejects:
        assert r["reason"].startswith(expected_rejects[r["session_id"]])
        assert r["file"] and r["row"] is not None

    assert_samples_match_expected(folder, pq.read_table(out).to_pylist(), check_v4_sample)


def check_v4_sample(row: dict[str, Any], expected: dict[str, Any], where: str) -> None:
    """What slime-v4's samples carry beside the reference's fields: a status, tito's provenance."""
    assert row["status"] == "completed", where
    assert "tito" in json.loads(row["metadata"]), where


def test_copy_matches_the_shared_corpus() -> None:
    """The project's copy must equal ../shared/conformance when that is beside the repo."""
    assert_copy_matches_shared(CONFORMANCE_COPY, CONFORMANCE_SHARED)
