"""This checkout's rebuild against another revision's, run for run, on the benchmark workload.

    python benchmarks/ab.py 6083a93                  # 10 rounds, 100 sessions, 1 and 2 workers
    python benchmarks/ab.py HEAD~1 --rounds 6 --workers 1

This machine's pace moves by more than most changes between two invocations
of benchmarks/run.py, so a change is judged here instead: the other revision
is checked out in a temporary worktree, and each round runs the bare read,
then both revisions at each worker count one after the other (the order
reversed every other round), so both see the same moments of the machine.
Prints the medians of wall time, user and system CPU (the process and its
workers) and minor page faults, the ratios against the bare read, and
whether the two revisions wrote the same bytes.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workload import REPO, WorkloadSpec, ensure  # noqa: E402


@dataclasses.dataclass
class Sample:
    wall: float
    user: float
    system: float
    faults: int


def timed(cmd: list[str], cwd: Path) -> Sample:
    """Run ``cmd`` to completion in ``cwd``; its wall time and the CPU and faults of its process tree."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    assert proc.stderr is not None
    err = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(cmd)} (in {cwd}) failed:\n{err}")
    return Sample(wall, usage.ru_utime, usage.ru_stime, usage.ru_minflt)


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", help="the revision to compare this checkout with (a commit, tag or branch)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds of runs (default 10)")
    parser.add_argument("--sessions", type=int, default=100, help="sessions in the workload (default 100)")
    parser.add_argument(
        "--workers", type=int, nargs="+", default=[1, 2], help="worker counts to compare (default: 1 2)"
    )
    args = parser.parse_args()

    logs = ensure(WorkloadSpec(sessions=args.sessions)) / "logs"
    with tempfile.TemporaryDirectory(prefix="tito-ab-") as tmp:
        other = Path(tmp) / "other"
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", "-q", str(other), args.rev], check=True)
        try:
            compare(args, logs, other, Path(tmp))
        finally:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(other)], check=False)


def compare(args: argparse.Namespace, logs: Path, other: Path, tmp: Path) -> None:
    for tree in (REPO, other):
        # Bytecode, as an installed copy has it (see benchmarks/run.py).
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "tito_cli")], check=True)

    def rebuild(tree: Path, workers: int) -> list[str]:
        out = tmp / f"{tree.name}-{workers}.parquet"
        # Run from the tree: `python -m tito_cli` imports the tito_cli beside the working directory.
        return [sys.executable, "-m", "tito_cli", "rebuild", str(logs), "--out", str(out), "--overwrite",
                "--workers", str(workers)]

    commands: dict[str, tuple[list[str], Path]] = {"bare read": ([sys.executable, str(HERE / "bare_read.py"),
                                                                   str(logs)], REPO)}
    for workers in args.workers:
        commands[f"{args.rev}, {workers} worker(s)"] = (rebuild(other, workers), other)
        commands[f"this checkout, {workers} worker(s)"] = (rebuild(REPO, workers), REPO)
    samples: dict[str, list[Sample]] = {name: [] for name in commands}
    order = list(commands)
    for round_number in range(args.rounds):
        for name in order if round_number % 2 == 0 else order[::-1]:
            cmd, cwd = commands[name]
            samples[name].append(timed(cmd, cwd))
        print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(s, field) for s in samples[name])

    bare = median("bare read", "wall")
    print(f"{args.sessions} sessions, {args.rounds} rounds, medians")
    print(f"{'':34s} {'wall s':>7s} {'user s':>7s} {'sys s':>6s} {'faults':>7s} {'/ bare':>7s}")
    for name in commands:
        wall = median(name, "wall")
        print(f"{name:34s} {wall:7.2f} {median(name, 'user'):7.2f} {median(name, 'system'):6.2f} "
              f"{median(name, 'faults'):7.0f} {wall / bare:7.2f}")
    outputs = sorted(tmp.glob("*.parquet"))
    digests = {md5(p) for p in outputs}
    print("outputs: " + ("all byte-identical" if len(digests) == 1 else f"{len(digests)} different files"))


if __name__ == "__main__":
    main()
