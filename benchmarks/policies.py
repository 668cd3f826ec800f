"""slime-0.3 against the default policy (slime-v4) on the benchmark workload, in the same run.

    python benchmarks/policies.py            # 100 sessions x 40 turns, 7 rounds
    python benchmarks/policies.py --quick    # 8 sessions x 30 turns, 3 rounds

Each round runs ``tito rebuild --workers 1`` once under each policy, as its
own process (every other round in the reverse order, so that a drift in the
machine's speed during a round favours neither).  Prints the medians, the
per-round ratios slime-0.3 / slime-v4 of wall time and of CPU time (user +
system), and judges the median CPU ratio against the target (within 5%): the
policies differ only in computation, and on a shared machine the wall time
of a one-core run mostly measures the neighbours (see docs/performance.md).
One worker: the policy's cost is per session, and a second worker would only
add scheduling noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import Run, rebuild_cmd, run  # noqa: E402
from workload import WorkloadSpec, ensure  # noqa: E402

TARGET = 1.05  # slime-0.3 time / slime-v4 time, at most
POLICIES = ("slime-v4", "slime-0.3")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller workload, fewer rounds")
    parser.add_argument("--repeat", type=int, default=None, help="rounds (default 7; quick 3)")
    parser.add_argument("--sessions", type=int, default=None, help="sessions in the workload (default 100)")
    args = parser.parse_args()

    spec = WorkloadSpec(sessions=8, turns=30) if args.quick else WorkloadSpec(sessions=100)
    if args.sessions:
        spec = WorkloadSpec(sessions=args.sessions, turns=spec.turns)
    repeat = args.repeat or (3 if args.quick else 7)
    logs = ensure(spec) / "logs"
    print(f"workload: {spec.sessions} sessions x {spec.turns} turns; {repeat} rounds, 1 worker")

    times: dict[str, list[Run]] = {p: [] for p in POLICIES}
    with tempfile.TemporaryDirectory(prefix="tito-policies-") as tmp:
        for round_number in range(repeat):
            order = POLICIES if round_number % 2 == 0 else tuple(reversed(POLICIES))
            for policy in order:
                times[policy].append(run(rebuild_cmd(logs, Path(tmp) / f"{policy}.parquet", 1, policy)))

    print(f"\n{'':12}{'median s':>10}{'min s':>8}{'max s':>8}{'CPU s':>8}")
    for policy, runs in times.items():
        secs = [r.seconds for r in runs]
        cpu = statistics.median(r.cpu_seconds for r in runs)
        print(f"{policy:12}{statistics.median(secs):>10.2f}{min(secs):>8.2f}{max(secs):>8.2f}{cpu:>8.2f}")
    ratios = [b.seconds / a.seconds for a, b in zip(times["slime-v4"], times["slime-0.3"], strict=True)]
    cpu_ratios = [b.cpu_seconds / a.cpu_seconds for a, b in zip(times["slime-v4"], times["slime-0.3"], strict=True)]
    print("per round, slime-0.3 / slime-v4: " + " ".join(f"{r:.3f}" for r in ratios))
    print("per round, CPU:               " + " ".join(f"{r:.3f}" for r in cpu_ratios))
    ratio = statistics.median(cpu_ratios)
    print(f"median ratio: wall {statistics.median(ratios):.3f}; CPU {ratio:.3f}  target <= {TARGET}  "
          f"{'ok' if ratio <= TARGET else 'MISSED'}")
    if ratio > TARGET:
        sys.exit(1)


if __name__ == "__main__":
    main()
