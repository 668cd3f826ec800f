"""Peak memory of tito's commands against the number of sessions (tiny two-turn sessions).

    python benchmarks/memory.py [--sessions 2000 40000] [--repeats 3] [--runs rebuild skyrl ...]

Each log holds N sessions of two short turns (written by the capture writer
in a process of its own, cached under .benchmarks/memory/).  Each command
runs in a fresh process, and its peak RSS is read from ``wait4``'s resource
usage of that child (which covers the worker processes it waited for: the
figure is the largest process of the run, not their sum).  The runs:

* ``rebuild``: ``tito rebuild LOG --out samples.parquet -j 1``
* ``skyrl``, ``trl``: the same with ``--format skyrl`` / ``--format trl``
* ``j2``: ``-j 2 --batch-mb 0.05`` (the log is too small for workers unless
  the batches are made small: about 2 batches at 2,000 sessions, 45 at 40,000)
* ``export``: ``tito export samples.parquet --to trl`` (the samples file the
  ``rebuild`` run wrote, kept beside the log)
* ``stats``: ``tito stats LOG --json``
* ``ls``: ``tito ls LOG --limit 20``

Printed per run: the median peak for each N, its ratio to the smallest N's
(the baseline, measured in the same run) and the growth per extra session.
Memory bounded by the largest session means that growth stays near zero:
what must grow is a string and a few numbers per session (the index and the
sessions table, docs/performance.md "Where memory can still grow").

The benchmark process itself imports nothing of tito, numpy or pyarrow: on
Linux a child's maxrss starts at its parent's at the fork, so a benchmark
that had written a 40,000-session log in its own process reported that
process's peak (262 MB) as the rebuild's (154 MB).
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
CACHE = REPO / ".benchmarks" / "memory"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

#: Run name -> the command's arguments after ``tito`` ({log}, {out} and {samples} filled in).
RUNS: dict[str, list[str]] = {
    "rebuild": ["rebuild", "{log}", "--out", "{out}.parquet", "--overwrite", "-j", "1"],
    "skyrl": ["rebuild", "{log}", "--out", "{out}.skyrl.parquet", "--overwrite", "-j", "1", "--format", "skyrl"],
    "trl": ["rebuild", "{log}", "--out", "{out}.trl.parquet", "--overwrite", "-j", "1", "--format", "trl"],
    "j2": ["rebuild", "{log}", "--out", "{out}.j2.parquet", "--overwrite", "-j", "2", "--batch-mb", "0.05"],
    "export": ["export", "{samples}", "--to", "trl", "--out", "{out}.export.parquet", "--overwrite"],
    "stats": ["stats", "{log}", "--json"],
    "ls": ["ls", "{log}", "--limit", "20"],
}


def write_tiny_log(folder: Path, sessions: int) -> None:
    """Runs in a process of its own (``--write``): the writer buffers the whole log."""
    sys.path.insert(0, str(REPO))
    from tito_cli.capture.writer import TurnLogWriter

    first = [{"role": "user", "content": "hi"}]
    reply = {"role": "assistant", "content": "yo"}
    second = [*first, reply, {"role": "user", "content": "more"}]
    with TurnLogWriter(folder, max_rows=1 << 20, max_bytes=1 << 40, max_age=None, name="tiny") as log:
        for i in range(sessions):
            sid = f"s{i:07d}"
            log.record_turn(sid, [1, 2, 3], [4, 5], [-0.1, -0.2], "stop", first, reply)
            log.record_turn(
                sid, [1, 2, 3, 4, 5, 6], [7], [-0.3], "stop", second, {"role": "assistant", "content": "ok"}
            )
            log.finish_session(sid, 1.0)


def tiny_log(sessions: int) -> Path:
    folder = CACHE / f"tiny-{sessions}"
    if (folder / "done").exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.parquet"):
        stale.unlink()
    subprocess.run([sys.executable, __file__, "--write", str(folder), str(sessions)], check=True, env=ENV)
    (folder / "done").write_text("")
    return folder


def samples_file(log: Path) -> Path:
    """The log's samples file, for ``export`` (rebuilt once, kept beside the log's folder)."""
    path = log.parent / f"{log.name}.samples.parquet"
    if not path.exists():
        command = [sys.executable, "-m", "tito_cli", "rebuild", str(log), "--out", str(path), "-j", "1"]
        subprocess.run(command, check=True, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return path


def peak_rss_mb(arguments: list[str]) -> float:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tito_cli", *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"tito {' '.join(arguments)} failed with exit {proc.returncode}")
    return usage.ru_maxrss / 1024  # KiB on Linux


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--write":
        write_tiny_log(Path(sys.argv[2]), int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=[2000, 40000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    args = parser.parse_args()
    sizes = sorted(args.sessions)
    logs = {n: tiny_log(n) for n in sizes}
    print(f"{'run':>8} {'sessions':>9} {'peak RSS MB':>12} {'vs ' + str(sizes[0]):>9} {'KiB/extra session':>18}")
    with tempfile.TemporaryDirectory() as scratch:
        out = str(Path(scratch) / "out")
        for run in args.runs:
            peaks = {}
            for n in sizes:
                fill = {"log": str(logs[n]), "out": out}
                if "{samples}" in RUNS[run]:
                    fill["samples"] = str(samples_file(logs[n]))
                arguments = [a.format(**fill) for a in RUNS[run]]
                peaks[n] = statistics.median(peak_rss_mb(arguments) for _ in range(args.repeats))
            base = sizes[0]
            for n in sizes:
                growth = (peaks[n] - peaks[base]) * 1024 / (n - base) if n != base else 0.0
                print(f"{run:>8} {n:>9} {peaks[n]:>12.1f} {peaks[n] / peaks[base]:>8.2f}x {growth:>18.2f}")


if __name__ == "__main__":
    main()
