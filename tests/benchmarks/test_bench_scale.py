"""``benchmarks/scale.py`` (docs/performance.md, "Memory at scale"): it runs, and it fails when samples differ."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.helpers import REPO


@pytest.mark.parametrize("fmt", ["1", "2"])
def test_scale_quick_rebuilds_every_log_at_every_worker_count_and_prints_the_ratios(tmp_path: Path, fmt: str) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/scale.py", "--quick", "--cache", str(tmp_path), "--formats", fmt],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    runs = [line.split() for line in lines if line.startswith(("one log", "many files", "random ids"))]
    # (layout, format, sessions, workers) of every run: one-log 6 and 24 sessions, many files 24, hashed ids 24.
    seen = sorted((" ".join(r[:2]), r[2], r[3], r[4]) for r in runs if len(r) == 8)
    expected = sorted(
        (layout, fmt, n, w)
        for layout, n in (("one log", "6"), ("one log", "24"), ("many files", "24"), ("random ids", "24"))
        for w in ("1", "2")
    )
    assert seen == expected, done.stdout
    assert all(float(r[6]) > 0 and float(r[7]) > 0 for r in runs if len(r) == 8)  # RSS and PSS were sampled
    ratios = [line for line in lines if "/" in line and not line.startswith("log")]
    assert any("2 workers / 1" in line for line in ratios) and any("24 / 6" in line for line in ratios)
    assert lines[-1] == "samples: byte-identical across workers, formats and layouts"
    # The many-file layout is the base's files, once per copy (4 copies of a base of 6 sessions).
    base = len(list((tmp_path / f"base-6-v{fmt}").glob("*.parquet")))
    assert len(list((tmp_path / f"qwen3-24-v{fmt}-files").glob("*.parquet"))) == 4 * base


def test_scale_fails_when_a_logs_runs_write_different_samples() -> None:
    spec = importlib.util.spec_from_file_location("scale", REPO / "benchmarks" / "scale.py")
    assert spec is not None and spec.loader is not None
    scale = importlib.util.module_from_spec(spec)
    sys.modules["scale"] = scale  # dataclasses look their module up there
    try:
        spec.loader.exec_module(scale)
    finally:
        del sys.modules["scale"]
    same = [scale.Run("one log", fmt, 8, w, 1.0, 1 << 20, 1 << 20, "aa") for fmt in (1, 2) for w in (1, 2)]
    # A log of hashed ids holds other sessions: its samples are other bytes, compared among themselves.
    scale.report([*same, scale.Run("random ids", 2, 8, 1, 1.0, 1 << 20, 1 << 20, "cc")])
    with pytest.raises(SystemExit, match=r"samples differ between runs of the same sessions: \[8\]"):
        scale.report([*same[:-1], scale.Run("one log", 2, 8, 2, 1.0, 1 << 20, 1 << 20, "bb")])
