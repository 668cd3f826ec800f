"""tito rebuild against the I/O floor: speed, scaling over workers, and memory.

    python benchmarks/run.py                # 100 sessions x 40 turns, prompts to ~110k tokens
    python benchmarks/run.py --sessions 20  # the issue's minimum workload
    python benchmarks/run.py --quick        # 8 sessions x 30 turns, 3 runs each (about a minute)
    python benchmarks/run.py --policy slime-0.3   # the same, every rebuild under another policy

Runs, in rounds, several times: the bare read (benchmarks/bare_read.py),
``tito rebuild --workers 1`` and ``tito rebuild --workers 2``, each as its own
process, as a user runs them (every other round in the reverse order, so that
a drift in the machine's speed during a round favours neither end).  The
timed runs are not watched: sampling a process tree's memory every few
milliseconds takes CPU from a run that uses both cores.  Peak RSS (the whole
process tree, sampled) comes from one more run of each command, and, for the
memory target, from rebuilds at one worker of a workload of --memory-sessions
sessions and one of 5x as many.  Prints medians, CPU seconds (user + system,
the process and its workers), peak RSS, the load average, and the three
ratios against their targets (speed and scaling: the medians of the ratios
within each round).  Workloads are generated once and cached under
.benchmarks/.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from workload import REPO, WorkloadSpec, ensure  # noqa: E402

SPEED_TARGET = 1.5  # rebuild (1 worker) / bare read, at most
SCALING_TARGET = 1.7  # throughput at 2 workers / at 1 worker, at least
MEMORY_TARGET = 1.2  # peak RSS with 5x the sessions / peak RSS, at most


def _tree_rss(pid: int) -> int:
    """Resident bytes of a process and all its descendants (0 once it is gone)."""
    total = 0
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


@dataclasses.dataclass
class Run:
    seconds: float
    # CPU and minor page faults of the process and the children it waited for.
    user_seconds: float
    system_seconds: float
    faults: int
    peak_rss: int  # bytes, process tree, sampled every 5 ms; 0 when not sampled

    @property
    def cpu_seconds(self) -> float:
        return self.user_seconds + self.system_seconds


def run(cmd: list[str], *, sample_rss: bool = False, cwd: Path = REPO) -> Run:
    """Run ``cmd`` in ``cwd`` to completion; with ``sample_rss``, watch its tree's memory meanwhile."""
    peak = 0
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss(proc.pid))
                time.sleep(0.005)

        sampler = threading.Thread(target=sample, daemon=True)
        if sample_rss:
            sampler.start()
        # wait4, not communicate(): the child's resource use comes with its exit status.
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        done.set()
        if sample_rss:
            sampler.join()
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(
                f"{' '.join(cmd)} (in {cwd}) failed ({proc.returncode}):\n{err.read().decode(errors='replace')}"
            )
    return Run(seconds, usage.ru_utime, usage.ru_stime, usage.ru_minflt, peak)


def rebuild_cmd(logs: Path, out: Path, workers: int, policy: str | None = None) -> list[str]:
    """``tito rebuild``; ``--policy`` only when given (ab.py runs revisions older than the option)."""
    cmd = [sys.executable, "-m", "tito_cli", "rebuild", str(logs), "--out", str(out), "--overwrite",
           "--workers", str(workers)]
    return cmd if policy is None else [*cmd, "--policy", policy]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller workload, fewer repetitions")
    parser.add_argument(
        "--repeat", type=int, default=None, help="rounds of timed runs (default 7: fewer are too noisy here; quick 3)"
    )
    parser.add_argument("--generator", default="synthetic", help="workload generator: synthetic, qwen3 or swe")
    parser.add_argument("--concurrency", type=int, default=None, help="sessions recorded at the same time")
    parser.add_argument(
        "--sessions",
        type=int,
        default=None,
        help="sessions in the speed and scaling workload (default 100: a real step records thousands, and the "
        "issue asks for at least 20; the ~0.3 s of interpreter start-up weighs less on more sessions)",
    )
    parser.add_argument(
        "--memory-sessions",
        type=int,
        default=None,
        help="sessions in the smaller memory workload; the larger has 5x as many (default 20)",
    )
    parser.add_argument("--policy", default=None, help="the policy every rebuild runs with (default: tito's)")
    args = parser.parse_args()

    if args.quick:
        spec = WorkloadSpec(generator=args.generator, sessions=8, turns=30)
        small = spec
    else:
        spec = WorkloadSpec(generator=args.generator, sessions=100)
        small = WorkloadSpec(generator=args.generator)
    if args.concurrency:
        spec = dataclasses.replace(spec, concurrency=args.concurrency)
        small = dataclasses.replace(small, concurrency=args.concurrency)
    if args.sessions:
        spec = dataclasses.replace(spec, sessions=args.sessions)
    if args.memory_sessions:
        small = dataclasses.replace(small, sessions=args.memory_sessions)
    big = dataclasses.replace(small, sessions=small.sessions * 5)
    repeat = args.repeat or (3 if args.quick else 7)

    logs = ensure(spec) / "logs"
    small_logs = ensure(small) / "logs"
    big_logs = ensure(big) / "logs"
    size = sum(p.stat().st_size for p in logs.rglob("*.parquet"))
    print(f"workload: {spec.sessions} sessions x {spec.turns} turns (+ a 4-turn sub-agent each), prompts growing "
          f"to {spec.final_prompt_tokens:,} tokens, {spec.concurrency} sessions at a time; "
          f"{size / 2**20:.0f} MiB of Parquet in {len(list(logs.glob('*.parquet')))} files")
    # Bytecode for tito's modules, as `pip install` writes it: a checkout run with
    # PYTHONDONTWRITEBYTECODE=1 (set on some machines) would otherwise compile every
    # module from source at each start (~0.1 s), which no installed copy does.
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "tito_cli")], check=True)
    print(f"load average before: {os.getloadavg()[0]:.2f} (on {os.cpu_count()} cores)")

    with tempfile.TemporaryDirectory(prefix="tito-bench-") as tmp:
        out = Path(tmp)
        commands = {
            "bare read": [sys.executable, str(HERE / "bare_read.py"), str(logs)],
            "rebuild, 1 worker": rebuild_cmd(logs, out / "w1.parquet", 1, args.policy),
            "rebuild, 2 workers": rebuild_cmd(logs, out / "w2.parquet", 2, args.policy),
        }
        times: dict[str, list[Run]] = {name: [] for name in commands}
        for round_number in range(repeat):
            order = list(commands) if round_number % 2 == 0 else list(reversed(commands))
            for name in order:
                times[name].append(run(commands[name]))
        identical = (out / "w1.parquet").read_bytes() == (out / "w2.parquet").read_bytes()
        peak_rss = {name: run(cmd, sample_rss=True).peak_rss for name, cmd in commands.items()}
        threaded = run([sys.executable, str(HERE / "bare_read.py"), str(logs), "--threads"])

        memory = {"x1": [], "x5": []}
        for _ in range(2 if args.quick else 3):
            m1, m5 = rebuild_cmd(small_logs, out / "m1.parquet", 1, args.policy), rebuild_cmd(
                big_logs, out / "m5.parquet", 1, args.policy
            )
            memory["x1"].append(run(m1, sample_rss=True).peak_rss)
            memory["x5"].append(run(m5, sample_rss=True).peak_rss)
    load_after = os.getloadavg()[0]

    med = {name: statistics.median(r.seconds for r in runs) for name, runs in times.items()}
    print()
    print(f"{'':22}{'median s':>10}{'min s':>8}{'max s':>8}{'CPU s':>8}{'peak RSS MiB':>14}")
    for name, runs in times.items():
        secs = [r.seconds for r in runs]
        cpu = statistics.median(r.cpu_seconds for r in runs)
        print(f"{name:22}{med[name]:>10.2f}{min(secs):>8.2f}{max(secs):>8.2f}{cpu:>8.2f}"
              f"{peak_rss[name] / 2**20:>14.0f}")
    print(f"{'(bare read, threaded)':22}{threaded.seconds:>10.2f}")
    mem1 = statistics.median(memory["x1"])
    mem5 = statistics.median(memory["x5"])
    print(f"peak RSS, 1 worker: {small.sessions} sessions {mem1 / 2**20:.0f} MiB, "
          f"{big.sessions} sessions {mem5 / 2**20:.0f} MiB")
    print(f"load average after: {load_after:.2f}")
    print()

    # Each round runs the three commands back to back.  This machine's speed moves by
    # +-20% between runs made seconds apart (noisy neighbours); a ratio of two runs of the
    # same round cancels whatever drifts more slowly than a round, so the ratios judged are
    # the medians of the per-round ratios.  Neither estimate is steady to better than about
    # +-0.1 here: the ratios of the overall medians are printed too.
    rounds = list(zip(*(times[name] for name in times), strict=True))
    speeds = [one.seconds / bare.seconds for bare, one, _ in rounds]
    scalings = [one.seconds / two.seconds for _, one, two in rounds]
    print("per round, speed:  " + " ".join(f"{r:.2f}" for r in speeds))
    print("per round, scaling:" + " ".join(f" {r:.2f}" for r in scalings))
    print(f"ratios of the medians: speed {med['rebuild, 1 worker'] / med['bare read']:.2f}, "
          f"scaling {med['rebuild, 1 worker'] / med['rebuild, 2 workers']:.2f}")
    print()
    speed = statistics.median(speeds)
    scaling = statistics.median(scalings)
    growth = mem5 / mem1
    rows = [
        ("speed: rebuild 1 worker / bare read", speed, f"<= {SPEED_TARGET}", speed <= SPEED_TARGET),
        ("scaling: 2 workers vs 1 (throughput)", scaling, f">= {SCALING_TARGET}", scaling >= SCALING_TARGET),
        ("memory: peak RSS 5x sessions / 1x", growth, f"<= {MEMORY_TARGET}", growth <= MEMORY_TARGET),
    ]
    for label, value, target, ok in rows:
        print(f"{label:40}{value:>6.2f}  target {target:8} {'ok' if ok else 'MISSED'}")
    print(f"{'output, 2 workers vs 1':40}{'byte-identical' if identical else 'DIFFERENT'}")
    if not identical or not all(ok for *_, ok in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
