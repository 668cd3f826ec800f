"""What this machine gives two busy processes that share nothing: the ceiling for tito's scaling.

    python benchmarks/ceiling.py                 # 100 sessions, 6 rounds (about 4 minutes)
    python benchmarks/ceiling.py --sessions 300

benchmarks/run.py judges ``--workers 2`` against ``--workers 1``.  Part of
any shortfall from 2x is the machine's, not tito's: two processes on two
cores share caches and memory bandwidth, and on a virtual machine the host
may not give both cores in full.  This measures that part.  Each round runs
the bare read alone, two bare reads at once, a one-worker rebuild alone and
two one-worker rebuilds at once (each of the whole workload, into its own
file), the order reversed every other round.  Two at once do twice the work,
so ``2 x alone / both`` is the throughput two processes get against one: 2.0
on an ideal machine.  A rebuild with two workers cannot beat its pair of
independent rebuilds, and it also has a serial start (interpreter, imports,
index) that a pair runs in parallel.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import rebuild_cmd  # noqa: E402
from workload import REPO, WorkloadSpec, ensure  # noqa: E402


def wall_seconds(commands: list[list[str]]) -> float:
    """Start ``commands`` together; the seconds until the last has finished."""
    with contextlib.ExitStack() as stack:
        # stderr to files, not pipes: waiting on one process must not leave another blocked on a full pipe.
        errs = [stack.enter_context(tempfile.TemporaryFile()) for _ in commands]
        start = time.perf_counter()
        procs = [
            subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)
            for command, err in zip(commands, errs, strict=True)
        ]
        for proc in procs:
            proc.wait()
        seconds = time.perf_counter() - start
        for proc, command, err in zip(procs, commands, errs, strict=True):
            if proc.returncode != 0:
                err.seek(0)
                message = err.read().decode(errors="replace")
                raise SystemExit(f"{' '.join(command)} failed ({proc.returncode}):\n{message}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=100, help="sessions in the workload (default 100)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the four runs (default 6)")
    args = parser.parse_args()

    logs = ensure(WorkloadSpec(sessions=args.sessions)) / "logs"
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "tito_cli")], check=True)
    with tempfile.TemporaryDirectory(prefix="tito-ceiling-") as tmp:
        bare = [sys.executable, str(HERE / "bare_read.py"), str(logs)]
        first, second = (rebuild_cmd(logs, Path(tmp) / f"{n}.parquet", 1) for n in ("a", "b"))
        runs = {
            "bare read, alone": [bare],
            "bare read, two at once": [bare, bare],
            "rebuild 1 worker, alone": [first],
            "rebuild 1 worker, two at once": [first, second],
        }
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        for round_number in range(args.rounds):
            order = list(runs) if round_number % 2 == 0 else list(reversed(runs))
            for name in order:
                seconds[name].append(wall_seconds(runs[name]))

    print(f"{args.sessions} sessions, {args.rounds} rounds, median seconds")
    for name, values in seconds.items():
        print(f"  {name:32}{statistics.median(values):>7.2f}")
    print("throughput of two at once against one alone (2.0 at best; the median of the per-round ratios):")
    for what in ("bare read", "rebuild 1 worker"):
        ratios = [2 * one / two for one, two in zip(seconds[f"{what}, alone"], seconds[f"{what}, two at once"],
                                                    strict=True)]
        print(f"  {what:32}{statistics.median(ratios):>7.2f}   per round: " + " ".join(f"{r:.2f}" for r in ratios))


if __name__ == "__main__":
    main()
