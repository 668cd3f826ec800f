"""The bad-input corpus (``tests/bad_input/<scenario>/``), each folder run through ``tito rebuild``.

``expected.json`` of a scenario says what must happen:

* ``exit_code`` — the exit status of ``tito rebuild``.
* ``rejects`` — session id -> ``{"file": <file name>, "row": <row>, "reason": <substring>}``:
  exactly these sessions are in the rejects report, each naming that file and row.
* ``exact`` — sessions whose samples must equal the conformance reference's:
  a mapping ``session id -> "<conformance folder>/<session>"``, or a list of
  ids from ``kit.GOOD``.  Every session in the output must be listed here or
  in ``samples``: nothing else may be written.
* ``samples`` — session id -> number of samples, for valid sessions without a reference.
* ``notes`` — session id -> substring of the line the summary prints about it.
* ``error`` — ``{"file": <file name>, "message": <substring>, "row": <row, optional>}``:
  the run must abort naming that file, and write nothing at all.
* ``fork_threshold`` — passed to ``--fork-threshold`` (default: tito's default).

Whatever the scenario, no Python traceback may reach the user.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from tito_cli.cli import app
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_INTERNAL

from .bad_input.kit import GOOD
from .helpers import CONFORMANCE, REPO, assert_rows_match_samples, read_jsonl

SCENARIO_ROOT = Path(__file__).parent / "bad_input"
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


def test_corpus_covers_every_outcome() -> None:
    outcomes = {json.loads((f / "expected.json").read_text())["exit_code"] for f in SCENARIOS}
    assert outcomes == {0, 3, 4}
    assert len(SCENARIOS) >= 25


@pytest.mark.parametrize("folder", SCENARIOS, ids=[f.name for f in SCENARIOS])
def test_scenario(folder: Path, tmp_path: Path) -> None:
    expected = build_scenario(folder, tmp_path / "logs")
    out = tmp_path / "out" / "samples.parquet"
    out.parent.mkdir()

    result = CliRunner().invoke(app, rebuild_args(tmp_path / "logs", out, expected))

    check_outcome(expected, out, result.exit_code, result.stdout, result.stderr)


@pytest.mark.parametrize("name", ["logprob-count-mismatch", "truncated-parquet", "seq-gaps", "only-empty-prompts"])
def test_scenario_end_to_end(name: str, tmp_path: Path) -> None:
    """The same, through ``python -m tito_cli`` in a fresh process, as a user runs it."""
    expected = build_scenario(SCENARIO_ROOT / name, tmp_path / "logs")
    out = tmp_path / "out" / "samples.parquet"
    out.parent.mkdir()
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO), "COLUMNS": "200"}

    proc = subprocess.run(
        [sys.executable, "-m", "tito_cli", *rebuild_args(tmp_path / "logs", out, expected)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )

    assert "\x1b[" not in proc.stderr, "no ANSI codes when stderr is not a terminal"
    check_outcome(expected, out, proc.returncode, proc.stdout, proc.stderr)
