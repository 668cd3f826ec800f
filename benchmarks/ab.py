"""This checkout's rebuild against another revision's, run for run, on the benchmark workload.

    python benchmarks/ab.py 6083a93                  # 10 rounds, 100 sessions, 1 and 2 workers
    python benchmarks/ab.py HEAD~1 --rounds 6 --workers 1
    python benchmarks/ab.py HEAD~1 --logs .benchmarks/workloads/NAME/logs-v2   # any log, e.g. compact.py's

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
import hashlib
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import Run, rebuild_cmd, run  # noqa: E402
from workload import REPO, WorkloadSpec, ensure  # noqa: E402


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
    parser.add_argument("--logs", type=Path, default=None,
                        help="a log to rebuild instead of the generated workload (--sessions is then ignored)")
    args = parser.parse_args()

    logs = args.logs.resolve() if args.logs else ensure(WorkloadSpec(sessions=args.sessions)) / "logs"
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

    # Each rebuild runs from its tree: `python -m tito_cli` imports the tito_cli beside the working directory.
    commands: dict[str, tuple[list[str], Path]] = {
        "bare read": ([sys.executable, str(HERE / "bare_read.py"), str(logs)], REPO)
    }
    for workers in args.workers:
        commands[f"{args.rev}, {workers} worker(s)"] = (rebuild_cmd(logs, tmp / f"other-{workers}.parquet", workers),
                                                        other)
        commands[f"this checkout, {workers} worker(s)"] = (rebuild_cmd(logs, tmp / f"this-{workers}.parquet", workers),
                                                           REPO)
    samples: dict[str, list[Run]] = {name: [] for name in commands}
    order = list(commands)
    for round_number in range(args.rounds):
        for name in order if round_number % 2 == 0 else order[::-1]:
            cmd, cwd = commands[name]
            samples[name].append(run(cmd, cwd=cwd))
        print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)

    def median(name: str, field: str) -> float:
        return statistics.median(getattr(s, field) for s in samples[name])

    bare = median("bare read", "seconds")
    print(f"{args.logs or f'{args.sessions} sessions'}, {args.rounds} rounds, medians")
    print(f"{'':34s} {'wall s':>7s} {'user s':>7s} {'sys s':>6s} {'faults':>7s} {'/ bare':>7s}")
    for name in commands:
        wall = median(name, "seconds")
        print(f"{name:34s} {wall:7.2f} {median(name, 'user_seconds'):7.2f} {median(name, 'system_seconds'):6.2f} "
              f"{median(name, 'faults'):7.0f} {wall / bare:7.2f}")
    outputs = sorted(tmp.glob("*.parquet"))
    digests = {md5(p) for p in outputs}
    print("outputs: " + ("all byte-identical" if len(digests) == 1 else f"{len(digests)} different files"))


if __name__ == "__main__":
    main()
