"""Running a bad-input scenario (``tests/bad_input/<scenario>/``): its log built, the rebuild's arguments, and
everything its ``expected.json`` promises checked (``tests/read/test_bad_input.py`` describes the keys)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.bad_input.kit import GOOD
from tests.support.helpers import CONFORMANCE, REPO, assert_rows_match_samples, read_jsonl
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_INTERNAL

SCENARIO_ROOT = REPO / "tests" / "bad_input"
SCENARIOS = sorted(p for p in SCENARIO_ROOT.iterdir() if (p / "expected.json").is_file())


def build_scenario(folder: Path, log: Path) -> dict[str, Any]:
    """Write the scenario's log into ``log``; return its expected outcome."""
    spec = importlib.util.spec_from_file_location(f"bad_input_{folder.name.replace('-', '_')}", folder / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    log.mkdir(parents=True, exist_ok=True)
    module.build(log)
    expected: dict[str, Any] = json.loads((folder / "expected.json").read_text(encoding="utf-8"))
    return expected


def reference_samples(ref: str) -> list[dict[str, Any]]:
    folder, sid = ref.split("/")
    for entry in read_jsonl(CONFORMANCE / folder / "expected.jsonl"):
        if entry["session_id"] == sid:
            samples: list[dict[str, Any]] = entry["samples"]
            return samples
    raise KeyError(ref)


def rebuild_args(log: Path, out: Path, expected: dict[str, Any]) -> list[str]:
    args = ["rebuild", str(log), "--out", str(out)]
    if "fork_threshold" in expected:
        args += ["--fork-threshold", str(expected["fork_threshold"])]
    return args


def squeeze(text: str) -> str:
    """Text without whitespace: the summary may wrap long lines anywhere when stderr is not a terminal."""
    return "".join(text.split())


def check_outcome(expected: dict[str, Any], out: Path, exit_code: int, stdout: str, stderr: str) -> None:
    """Everything a scenario promises, given how the run ended."""
    assert "Traceback" not in stdout + stderr
    assert exit_code != EXIT_INTERNAL, stderr
    assert exit_code == expected["exit_code"], stderr
    assert stdout == "", "rebuild writes data to files and diagnostics to stderr"
    rejects_file = out.with_name(out.name + ".rejects.jsonl")

    if "error" in expected:
        error = expected["error"]
        assert exit_code == EXIT_BAD_INPUT
        lines = [line for line in stderr.splitlines() if line.startswith("ERROR ")]
        assert len(lines) == 1, stderr
        assert error["file"] in lines[0] and error["message"] in lines[0], stderr
        if "row" in error:
            assert f"row {error['row']}" in lines[0], stderr
        # Nothing written: no samples, no rejects report, no temporary file.
        assert list(out.parent.iterdir()) == []
        return

    assert "ERROR" not in stderr, stderr
    rejects = {r["session_id"]: r for r in read_jsonl(rejects_file)}
    assert set(rejects) == set(expected.get("rejects", {})), stderr
    for sid, want in expected.get("rejects", {}).items():
        got = rejects[sid]
        assert Path(got["file"]).name == want["file"], got
        assert got["row"] == want["row"], got
        assert want["reason"] in got["reason"], got
        # The summary on stderr names it too.
        assert squeeze(f"{sid}: {want['reason']}") in squeeze(stderr), stderr

    rows = pq.read_table(out).to_pylist()
    written: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        written.setdefault(row["session_id"], []).append(row)
    exact = expected.get("exact", {})
    if isinstance(exact, list):
        exact = {sid: GOOD[sid] for sid in exact}
    counts = expected.get("samples", {})
    assert not set(written) & set(rejects), "a rejected session must lose all its samples"
    assert set(written) <= set(exact) | set(counts), sorted(written)
    for sid, count in counts.items():
        assert len(written.get(sid, [])) == count, sid
    for sid, ref in exact.items():
        assert_rows_match_samples(sid, written.get(sid, []), reference_samples(ref))

    for sid, text in expected.get("notes", {}).items():
        assert squeeze(f"{sid}: {text}") in squeeze(stderr), stderr
