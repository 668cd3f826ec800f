"""``benchmarks/stages.py``, as docs/performance.md shows it, runs on a real log and accounts for the whole run."""

from __future__ import annotations

import subprocess
import sys

from tests.support.helpers import REPO

STAGES = [
    "imports",
    "decoding row groups, building column views",
    "validation (rows into turns)",
    "routing and linearizing",
    "sample tables",
    "writing the samples file",
    "the rest",
    "whole run",
]


def test_stages_times_every_stage_of_a_rebuild() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/stages.py", "fixtures/logs", "--runs", "1"],
        cwd=REPO, capture_output=True, text=True, check=True, timeout=300,
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "fixtures/logs, 1 runs, medians"
    rows = {line[:46].strip(): line[46:].split() for line in lines[2:]}
    assert list(rows) == STAGES
    seconds = {name: float(values[0]) for name, values in rows.items()}
    # Every wrapped stage ran (a renamed function would leave its timer at zero), and the parts add up.
    assert all(seconds[name] > 0 for name in STAGES[:6]), seconds
    assert abs(sum(seconds[name] for name in STAGES[:7]) - seconds["whole run"]) < 0.01
    assert rows["whole run"][1] == "100%"
