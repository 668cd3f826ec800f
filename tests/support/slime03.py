"""The slime-0.3 conformance corpus checked through a rebuild: a folder as a log, and the samples and summary
against the folder's expected outputs (the CLI, the local engine and Ray are held to the same check)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.support.helpers import assert_samples_match_expected, conformance_log, read_jsonl

FLAGS = ("truncated", "use_tool", "ill_formed")


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
