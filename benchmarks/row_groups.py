"""Workers and memory on a log of huge row groups (issue #18): -j 1, -j 2 and the default, and peak RSS.

    python benchmarks/row_groups.py                # 40 swe sessions in 3 files of one row group each, 5 rounds
    python benchmarks/row_groups.py --workload     # and the benchmark workload (benchmarks/workload.py, 20 sessions)
    python benchmarks/row_groups.py --quick        # 6 sessions, 2 rounds: checks that it runs

The shape is the one issue #18 measured: ``tito simulate --profile swe
--sessions 40`` as the simulator wrote it then, three files of one row group
each (today's writer bounds row groups, so the log is rewritten with pyarrow),
in format 1 and in format 2.  The same sessions in tito's bounded row groups
(``tito compact``) are the memory baseline.  Logs are cached under
``.benchmarks/row_groups/``.

Round after round (every other round in reverse order), each command its own
process: ``tito rebuild`` of each log at ``-j 1``, ``-j 2`` and without
``-j`` (the default).  Printed: medians of wall and CPU seconds (user +
system, workers included), the per-round ratios ``-j 2 / -j 1`` and
``default / -j 1`` of wall time, whether ``-j 2`` was capped (the summary's
``note:``), then the peak RSS of sampled 1-worker rebuilds of the huge and the
bounded log, and whether every output has the same bytes.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import Run, run  # noqa: E402
from workload import REPO, WorkloadSpec, ensure  # noqa: E402

sys.path.insert(0, str(REPO))
from tito_cli.run.compact import compact  # noqa: E402

CACHE = REPO / ".benchmarks" / "row_groups"
#: More workers never slower than one beyond noise (this machine: about +-10% between runs).
NEVER_SLOWER = 1.1
CONFIGS = {"-j 1": ["--workers", "1"], "-j 2": ["--workers", "2"], "default": []}


def _one_row_group_per_file(log: Path, out: Path, files: int) -> None:
    """``log``'s turns, in their order, rewritten into ``files`` files of one row group each."""
    table = pa.concat_tables(pq.read_table(f) for f in sorted(log.glob("turns-*.parquet")))
    out.mkdir(parents=True)
    for k in range(files):
        lo, hi = table.num_rows * k // files, table.num_rows * (k + 1) // files
        part = table.slice(lo, hi - lo)
        pq.write_table(part, out / f"turns-huge-{k:06d}.parquet", row_group_size=max(part.num_rows, 1))
    for sessions in log.glob("sessions-*.parquet"):
        shutil.copy(sessions, out / sessions.name)


def logs(sessions: int, files: int) -> dict[str, Path]:
    """The huge-row-group logs in both formats and the bounded format-1 log (generated once)."""
    folder = CACHE / f"swe-{sessions}-files{files}"
    names = {"huge v1": folder / "huge-v1", "huge v2": folder / "huge-v2", "bounded v1": folder / "bounded-v1"}
    if (folder / "COMPLETE").exists():
        return names
    shutil.rmtree(folder, ignore_errors=True)
    print(f"generating {sessions} swe sessions …", flush=True)
    simulated = folder / "simulated"
    subprocess.run([sys.executable, "-m", "tito_cli", "simulate", "--profile", "swe", "--sessions", str(sessions),
                    "--seed", "0", "--out", str(simulated)], cwd=REPO, check=True, capture_output=True)
    compact([simulated], names["bounded v1"], format=1)
    _one_row_group_per_file(names["bounded v1"], names["huge v1"], files)
    _one_row_group_per_file(simulated, names["huge v2"], files)
    (folder / "COMPLETE").write_text("")
    return names


def _rebuild_cmd(log: Path, out: Path, config: str) -> list[str]:
    return [sys.executable, "-m", "tito_cli", "rebuild", str(log), "--out", str(out), "--overwrite", *CONFIGS[config]]


def _output(scratch: Path, name: str, config: str) -> Path:
    return scratch / f"{name.replace(' ', '-')}-{config.replace(' ', '')}.parquet"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=40)
    parser.add_argument("--files", type=int, default=3, help="files of one row group each (default 3)")
    parser.add_argument("--repeat", type=int, default=5, help="rounds (default 5)")
    parser.add_argument("--workload", action="store_true", help="also the benchmark workload, 20 sessions")
    parser.add_argument("--quick", action="store_true", help="6 sessions, 2 rounds: checks that it runs")
    args = parser.parse_args()
    if args.quick:
        args.sessions, args.repeat = 6, 2
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "tito_cli")], check=True)
    cases = logs(args.sessions, args.files)
    if args.workload:
        cases["workload v1"] = ensure(WorkloadSpec(sessions=8 if args.quick else 20)) / "logs"
    env_note = f"load average before: {os.getloadavg()[0]:.2f} (on {os.cpu_count()} cores)"
    print(f"swe, {args.sessions} sessions; huge: {args.files} files of one row group each")
    for name, log in cases.items():
        groups = [pq.ParquetFile(f).metadata for f in sorted(log.glob("turns-*.parquet"))]
        decoded = sum(m.row_group(g).total_byte_size for m in groups for g in range(m.num_row_groups))
        print(f"  {name:<12} {sum(m.num_row_groups for m in groups):>4} row groups in {len(groups):>3} files, "
              f"{sum(m.num_rows for m in groups):,} turns, {decoded / 2**20:,.0f} MiB decoded")
    print(env_note)

    with tempfile.TemporaryDirectory() as scratch_dir:
        scratch = Path(scratch_dir)
        times: dict[tuple[str, str], list[Run]] = {}
        capped: dict[tuple[str, str], bool] = {}
        for round_number in range(args.repeat):
            order = [(name, config) for name in cases for config in CONFIGS]
            if round_number % 2:
                order.reverse()
            for name, config in order:
                out = _output(scratch, name, config)
                times.setdefault((name, config), []).append(run(_rebuild_cmd(cases[name], out, config)))
                if round_number == 0:
                    # Once more, untimed, for the summary's words.
                    shown = subprocess.run(_rebuild_cmd(cases[name], scratch / "note.parquet", config), cwd=REPO,
                                           capture_output=True, text=True, env={**os.environ, "COLUMNS": "400"})
                    capped[(name, config)] = "note: rebuilt with" in shown.stderr
        peaks = {}
        for name in cases:
            out = scratch / f"rss-{name.replace(' ', '-')}.parquet"
            peaks[name] = run(_rebuild_cmd(cases[name], out, "-j 1"), sample_rss=True).peak_rss
        same = {name: len({_output(scratch, name, c).read_bytes() for c in CONFIGS}) == 1 for name in cases}
        swe_outputs = {_output(scratch, n, "-j 1").read_bytes() for n in cases if "workload" not in n}
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print()
    print(f"{'':<24}{'median s':>10}{'min s':>8}{'max s':>8}{'CPU s':>8}  capped")
    for (name, config), runs in times.items():
        wall = [r.seconds for r in runs]
        cpu = statistics.median(r.cpu_seconds for r in runs)
        print(f"{name + ', ' + config:<24}{statistics.median(wall):>10.2f}{min(wall):>8.2f}{max(wall):>8.2f}"
              f"{cpu:>8.2f}  {'yes (note)' if capped.get((name, config)) else 'no'}")
    print()
    verdicts = []
    for name in cases:
        one = [r.seconds for r in times[(name, "-j 1")]]
        for config in ("-j 2", "default"):
            ratios = [r.seconds / base for r, base in zip(times[(name, config)], one, strict=True)]
            cpu = [r.cpu_seconds / b.cpu_seconds for r, b in zip(times[(name, config)], times[(name, "-j 1")],
                                                                   strict=True)]
            judged = statistics.median(ratios)
            verdicts.append(judged <= NEVER_SLOWER)
            print(f"{name}: {config} / -j 1 per round: {' '.join(f'{x:.2f}' for x in ratios)}; median {judged:.2f} "
                  f"(CPU {statistics.median(cpu):.2f})  target <= {NEVER_SLOWER}  "
                  f"{'ok' if judged <= NEVER_SLOWER else 'MISSED'}")
    print()
    print("peak RSS, 1 worker: " + ", ".join(f"{name} {peak / 2**20:,.0f} MiB" for name, peak in peaks.items()))
    print(f"memory: huge row groups / bounded, 1 worker (format 1)  {peaks['huge v1'] / peaks['bounded v1']:.2f}")
    identical = all(same.values()) and len(swe_outputs) == 1
    print(f"output, every log and worker count              {'byte-identical' if identical else 'DIFFERENT'}")
    if not identical or not all(verdicts):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
