"""Peak memory of ``tito rebuild`` against the number of sessions (tiny two-turn sessions).

    python benchmarks/memory.py [--sessions 2000 20000 40000] [--repeats 3]

Each log holds N sessions of two short turns (written by the capture writer,
cached under .benchmarks/memory/).  Each rebuild runs in a fresh process
(one worker), and its peak RSS is read from ``getrusage`` of that child
alone (a wait4 per run).  Printed: the median peak for each N, its ratio to
the smallest N's (the baseline, measured in the same run), and the growth
per extra session.  Memory bounded by the largest session means that growth
stays near zero (the index and the sessions table, a few hundred bytes a
session, are all that must grow); a writer that buffered every session's
table until its token budget filled grew by ~17 KiB a session.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tito_cli.capture.writer import TurnLogWriter  # noqa: E402

CACHE = REPO / ".benchmarks" / "memory"
FIRST = [{"role": "user", "content": "hi"}]
REPLY = {"role": "assistant", "content": "yo"}
SECOND = [*FIRST, REPLY, {"role": "user", "content": "more"}]


def tiny_log(sessions: int) -> Path:
    folder = CACHE / f"tiny-{sessions}"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.parquet"):
        stale.unlink()
    with TurnLogWriter(folder, max_rows=1 << 20, max_bytes=1 << 40, max_age=None, name="tiny") as log:
        for i in range(sessions):
            sid = f"s{i:07d}"
            log.record_turn(sid, [1, 2, 3], [4, 5], [-0.1, -0.2], "stop", FIRST, REPLY)
            log.record_turn(
                sid, [1, 2, 3, 4, 5, 6], [7], [-0.3], "stop", SECOND, {"role": "assistant", "content": "ok"}
            )
            log.finish_session(sid, 1.0)
    (folder / "done").write_text("")
    return folder


def peak_rss_mb(log: Path, out: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tito_cli", "rebuild", str(log), "--out", str(out), "--overwrite", "-j", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"rebuild of {log} failed with exit {proc.returncode}")
    return usage.ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[2000, 20000, 40000])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = sorted(args.sessions)
    with tempfile.TemporaryDirectory() as scratch:
        peaks = {}
        for n in sizes:
            log = tiny_log(n)
            peaks[n] = statistics.median(
                peak_rss_mb(log, Path(scratch) / "samples.parquet") for _ in range(args.repeats)
            )
    base = sizes[0]
    print(f"{'sessions':>9} {'peak RSS MB':>12} {'vs ' + str(base):>9} {'KiB/extra session':>18}")
    for n in sizes:
        growth = (peaks[n] - peaks[base]) * 1024 / (n - base) if n != base else 0.0
        print(f"{n:>9} {peaks[n]:>12.1f} {peaks[n] / peaks[base]:>8.2f}x {growth:>18.2f}")


if __name__ == "__main__":
    main()
