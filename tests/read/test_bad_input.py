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

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bad_input_runs import SCENARIO_ROOT, SCENARIOS, build_scenario, check_outcome, rebuild_args
from tests.support.cli import tito
from tests.support.helpers import REPO


def test_corpus_covers_every_outcome() -> None:
    outcomes = {json.loads((f / "expected.json").read_text())["exit_code"] for f in SCENARIOS}
    assert outcomes == {0, 3, 4}
    assert len(SCENARIOS) >= 25


@pytest.mark.parametrize("folder", SCENARIOS, ids=[f.name for f in SCENARIOS])
def test_scenario(folder: Path, tmp_path: Path) -> None:
    expected = build_scenario(folder, tmp_path / "logs")
    out = tmp_path / "out" / "samples.parquet"
    out.parent.mkdir()

    result = tito(*rebuild_args(tmp_path / "logs", out, expected))

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
