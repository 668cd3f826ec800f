"""The runner seam: one orchestration for every runner, options a runner does not have refused, and every
pool of worker processes (the golden dumps' too) dying with the command that started it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import tito
from tests.support.helpers import REPO
from tests.support.processes import ENV, TIMEOUT, alive, children, wait_for, write_workload
from tito_cli.errors import EXIT_USAGE
from tito_cli.run.local import LocalOptions, LocalRunner
from tito_cli.run.rebuild import RebuildOptions, rebuild, rebuild_with, runner_for

DEMO = REPO / "fixtures" / "logs"


@pytest.mark.parametrize(("option", "value"), [("--workers", "2"), ("--batch-mb", "1")])
def test_the_ray_engine_refuses_the_local_runners_options(option: str, value: str, tmp_path: Path) -> None:
    # Before this was checked, --engine ray ran and silently ignored them.
    out = tmp_path / "s.parquet"
    result = tito("rebuild", str(DEMO), "--out", str(out), "--engine", "ray", option, value)
    assert result.exit_code == EXIT_USAGE, result.output
    words = " ".join(result.output.replace("│", " ").split())
    assert f"Invalid value for {option}: applies to the local engine only, not ray" in words
    assert not out.exists()


def test_the_library_refuses_them_too(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="option 'workers' applies to the local engine only, not ray"):
        rebuild([DEMO], tmp_path / "s.parquet", engine="ray", workers=2)
    assert isinstance(runner_for("local", {"workers": 2}), LocalRunner)
    assert runner_for("local", LocalOptions(workers=3)).options == LocalOptions(workers=3)


def test_a_rebuild_through_the_seam_is_the_rebuild(tmp_path: Path) -> None:
    direct = rebuild([DEMO], tmp_path / "a.parquet", workers=2, batch_bytes=1)
    run = RebuildOptions(engine="local", engine_options=LocalOptions(workers=2, batch_bytes=1))
    seam = rebuild_with([DEMO], tmp_path / "b.parquet", None, run)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert seam.sessions == direct.sessions > 0 and seam.rejected == direct.rejected


def test_stale_temporaries_of_an_export_are_swept(tmp_path: Path) -> None:
    # Only the local rebuild swept them before the orchestration was one.
    samples = tmp_path / "samples.parquet"
    rebuild([DEMO], samples, workers=1)
    out = tmp_path / "sft.parquet"
    dead = tmp_path / ".sft.parquet.0123456789ab.tmp"
    dead.write_bytes(b"half a file a killed export left")
    result = tito("export", str(samples), "--to", "trl", "--out", str(out))
    assert result.exit_code == 0, result.output
    assert out.exists() and not dead.exists()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_golden_dump_workers_die_with_a_killed_dump(tmp_path: Path, how: int) -> None:
    log = tmp_path / "logs"
    write_workload(log, copies=6)
    args = [sys.executable, "-m", "tito_cli", "dump", str(log), "-j", "2", "--out", str(tmp_path / "dumps")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        assert wait_for(lambda: len(children(proc.pid)) >= 2, TIMEOUT), "the dump started no workers"
        workers = children(proc.pid)
        proc.send_signal(how)
        proc.wait(TIMEOUT)
        # Killed before any cleanup could run: the workers must go by themselves.
        assert wait_for(lambda: not any(alive(w) for w in workers), 15), "workers outlived their dump"
    finally:
        proc.kill()
        proc.wait(TIMEOUT)
