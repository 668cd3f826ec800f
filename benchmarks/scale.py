"""tito rebuild at scale: wall time and peak memory of the whole process tree, 1 and 2 workers, both formats.

    python benchmarks/scale.py                     # 1k, 8k, 10k, 32k, 100k sessions + the many-file layout
    python benchmarks/scale.py --sizes 10000 32000 --many-file 8000 32000
    python benchmarks/scale.py --sizes --many-file --random-ids 10000 100000 --formats 2
    python benchmarks/scale.py --quick             # a tiny base, replicated a few times: checks that it runs

The workload is the qwen3 profile (``tito simulate --profile qwen3``, the real
Qwen3 tokenizer and chat template): a base log of ``--base`` sessions (1,000),
simulated once, converted to format 1 with ``tito compact --format 1``, and
replicated with renamed session ids (copy k of session ``s`` is ``c{k}-{s}``,
so the copies follow each other in id order as in log order) into logs of
each size, cached under ``.benchmarks/scale/``.  Three layouts: **one log**,
every copy's turns streamed into turns files of up to 65,536 rows (the base's
row groups kept); **many files**, each copy's files written as they are
(the 1,000-session base has eight files: 256 files at 32,000 sessions); and
**random ids**, one log whose session ids are hashes of those names, so
unrelated to the order sessions finish in (as most harnesses' ids are): the
rebuild hands sessions out in id order, and holds back nearly all of them
until the first id comes.

Each run is ``tito rebuild LOG --out OUT -j W`` in a process of its own; a
thread samples every 20 ms the resident memory of that process and all its
descendants (the workers, the fork server), read from ``/proc``: ``RSS`` sums
each process's resident set (pages two processes share are counted in each:
the libraries, what a forked worker has not written yet), ``PSS`` divides a
shared page between the processes that map it (``smaps_rollup``), so it adds
up to what the tree takes from the machine.  The samples file of every run
is hashed: a log's runs must write the same bytes at any worker count, in
either format and in either layout, or the benchmark fails.

Printed: one row per run, then the ratios the memory target is judged on
(docs/performance.md, "Memory at scale"): the 2-worker peak over the
1-worker peak of the same log, and the 1-worker peak at 32k over 8k and at
100k over 10k sessions.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".benchmarks" / "scale"
ENV = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

#: Turn rows a file of the one-log layout holds at most.
ROWS_PER_FILE = 65_536
#: (sizes, many-file sizes) of a full run, and of ``--quick`` (its base has QUICK_BASE sessions).
SIZES = [1_000, 8_000, 10_000, 32_000, 100_000]
MANY_FILE_SIZES = [8_000, 32_000]
QUICK_BASE = 6
QUICK_SIZES = [6, 24]
#: Ratios printed: (label, layout, sessions of the larger log, of the smaller).
GROWTH = [(32_000, 8_000), (100_000, 10_000), (24, 6)]


def base_log(folder: Path, sessions: int, fmt: int) -> Path:
    """The simulated base log in format ``fmt`` (simulated once, format 1 by ``tito compact``)."""
    v2 = folder / f"base-{sessions}-v2"
    if not (v2 / "COMPLETE").exists():
        shutil.rmtree(v2, ignore_errors=True)
        tito("simulate", "--profile", "qwen3", "--sessions", str(sessions), "--seed", "0", "--out", str(v2))
        (v2 / "COMPLETE").write_text("")
    if fmt == 2:
        return v2
    v1 = folder / f"base-{sessions}-v1"
    if not (v1 / "COMPLETE").exists():
        shutil.rmtree(v1, ignore_errors=True)
        tito("compact", str(v2), "--out", str(v1), "--format", "1")
        (v1 / "COMPLETE").write_text("")
    return v1


def tito(*arguments: str) -> None:
    done = subprocess.run([sys.executable, "-m", "tito_cli", *arguments], env=ENV, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"tito {' '.join(arguments)} failed ({done.returncode}):\n{done.stderr}")


def replicated(folder: Path, base: Path, base_sessions: int, fmt: int, sessions: int, layout: str) -> Path:
    """The base log replicated to ``sessions`` sessions (a multiple of the base's), cached.

    ``layout``: ``log`` (one log), ``files`` (each copy's files as they are), ``random`` (one log,
    session ids hashed: unrelated to the order sessions finish in, as most harnesses' ids are)."""
    out = folder / f"qwen3-{sessions}-v{fmt}-{layout}"
    if (out / "COMPLETE").exists():
        return out
    if sessions % base_sessions:
        raise SystemExit(f"{sessions} sessions is not a multiple of the base's {base_sessions}")
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # In a process of its own: this one imports nothing of pyarrow (see measure()).
    command = [sys.executable, __file__, "--replicate", str(base), str(out), str(sessions // base_sessions), layout]
    subprocess.run(command, check=True, env=ENV)
    (out / "COMPLETE").write_text("")
    return out


def write_replicas(base: Path, out: Path, copies: int, layout: str) -> None:
    """Copy k of every session of ``base`` (renamed ``c{k:04d}-{id}``, or its sha256 for ``random``) into ``out``."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    sources = sorted(base.glob("*.parquet"))
    many_files = layout == "files"
    hashed: dict[str, str] = {}

    def renamed(table: pa.Table, copy: int) -> pa.Table:
        ids = pc.binary_join_element_wise(f"c{copy:04d}", table.column("session_id"), "-")
        if layout == "random":
            names = [hashed.setdefault(sid, hashlib.sha256(sid.encode()).hexdigest()[:32]) for sid in ids.to_pylist()]
            ids = pa.array(names, pa.string())
        column = table.schema.get_field_index("session_id")
        return table.set_column(column, table.schema.field(column), ids)

    def writer(path: Path, schema: pa.Schema) -> pq.ParquetWriter:
        return pq.ParquetWriter(path, schema, compression="zstd")

    if many_files:
        for copy in range(copies):
            for source in sources:
                table = pq.ParquetFile(source)
                with writer(out / f"c{copy:04d}-{source.name}", table.schema_arrow) as copied:
                    for group in range(table.num_row_groups):
                        copied.write_table(renamed(table.read_row_group(group), copy), row_group_size=1 << 30)
        return
    # One log: every copy's turns in files of up to ROWS_PER_FILE rows, sessions rows in one file.
    turns = [p for p in sources if pq.read_schema(p).metadata.get(b"tito.table") == b"turns"]
    sessions = [p for p in sources if p not in turns]
    sink: pq.ParquetWriter | None = None
    rows = files = 0
    for copy in range(copies):
        for source in turns:
            table = pq.ParquetFile(source)
            for group in range(table.num_row_groups):
                chunk = renamed(table.read_row_group(group), copy)
                if sink is None or rows + len(chunk) > ROWS_PER_FILE:
                    if sink is not None:
                        sink.close()
                    files += 1
                    sink, rows = writer(out / f"turns-{files:05d}.parquet", table.schema_arrow), 0
                sink.write_table(chunk, row_group_size=1 << 30)
                rows += len(chunk)
    if sink is not None:
        sink.close()
    schema = pq.read_schema(sessions[0])
    with writer(out / "sessions.parquet", schema) as rows_sink:
        for copy in range(copies):
            for source in sessions:
                rows_sink.write_table(renamed(pq.read_table(source).cast(schema), copy))


@dataclasses.dataclass
class Run:
    label: str
    fmt: int
    sessions: int
    workers: int
    seconds: float
    rss: int
    pss: int
    digest: str


def tree_memory(pid: int, pss: bool) -> tuple[int, int]:
    """(RSS, PSS) bytes of ``pid`` and its descendants; PSS only when asked (0 otherwise)."""
    rss = proportional = 0
    page = os.sysconf("SC_PAGE_SIZE")
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                rss += int(f.read().split()[1]) * page
            if pss:
                with open(f"/proc/{p}/smaps_rollup") as f:
                    for line in f:
                        if line.startswith("Pss:"):
                            proportional += int(line.split()[1]) * 1024
                            break
            with open(f"/proc/{p}/task/{p}/children") as f:
                stack.extend(int(c) for c in f.read().split())
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return rss, proportional


def measure(log: Path, out: Path, workers: int, extra: list[str]) -> tuple[float, int, int, str]:
    """One rebuild: (seconds, peak tree RSS, peak tree PSS, sha256 of the samples file)."""
    command = [sys.executable, "-m", "tito_cli", "rebuild", str(log), "--out", str(out), "--overwrite",
               "-j", str(workers), *extra]
    peak_rss = peak_pss = 0
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err, env=ENV)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak_rss, peak_pss
            while not done.is_set():
                rss, pss = tree_memory(proc.pid, pss=True)
                peak_rss, peak_pss = max(peak_rss, rss), max(peak_pss, pss)
                done.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(command)} failed ({code}):\n{err.read().decode(errors='replace')}")
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    return seconds, peak_rss, peak_pss, digest


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--replicate":
        write_replicas(Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help=f"a {QUICK_BASE}-session base, {QUICK_SIZES} sessions")
    parser.add_argument("--base", type=int, default=1_000, help="sessions of the simulated base log")
    parser.add_argument("--sizes", type=int, nargs="*", default=None, help="sessions of the one-log runs")
    parser.add_argument("--many-file", type=int, nargs="*", default=None, help="sessions of the many-file runs")
    parser.add_argument("--random-ids", type=int, nargs="*", default=None,
                        help="sessions of one-log runs whose session ids are hashes (default: none; --quick: 24)")
    parser.add_argument("--formats", type=int, nargs="+", default=[1, 2], choices=[1, 2])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each log and worker count; the row shows their medians (default 1)")
    parser.add_argument("--cache", type=Path, default=CACHE, help=f"where logs are kept (default {CACHE})")
    args = parser.parse_args()
    base_sessions = QUICK_BASE if args.quick else args.base
    sizes = args.sizes if args.sizes is not None else (QUICK_SIZES if args.quick else SIZES)
    many = args.many_file if args.many_file is not None else (QUICK_SIZES[-1:] if args.quick else MANY_FILE_SIZES)
    random_ids = args.random_ids if args.random_ids is not None else (QUICK_SIZES[-1:] if args.quick else [])
    # A quick log is too small for workers unless its batches are made small.
    extra = ["--batch-mb", "0.2"] if args.quick else []
    args.cache.mkdir(parents=True, exist_ok=True)

    runs: list[Run] = []
    print(f"qwen3 base of {base_sessions} sessions, replicated; peak memory of the whole process tree")
    print(f"{'log':<10} {'fmt':>3} {'sessions':>9} {'workers':>7} {'wall s':>8} {'RSS MiB':>9} {'PSS MiB':>9}")
    with tempfile.TemporaryDirectory() as scratch:
        for label, fmt, n, log in logs(args.cache, base_sessions, args.formats, sizes, many, random_ids):
            for workers in args.workers:
                out = Path(scratch) / f"{label}-{n}-v{fmt}-j{workers}.parquet"
                repeats = [measure(log, out, workers, extra) for _ in range(args.repeat)]
                seconds = statistics.median(r[0] for r in repeats)
                rss = int(statistics.median(r[1] for r in repeats))
                pss = int(statistics.median(r[2] for r in repeats))
                if len({r[3] for r in repeats}) > 1:
                    raise SystemExit(f"{log}: the samples differ between repeats at {workers} workers")
                digest = repeats[0][3]
                out.unlink()
                run = Run(label, fmt, n, workers, seconds, rss, pss, digest)
                runs.append(run)
                print(f"{label:<10} {fmt:>3} {n:>9,} {workers:>7} {seconds:>8.2f} {rss / 2**20:>9.0f} "
                      f"{pss / 2**20:>9.0f}", flush=True)
    report(runs)


def logs(cache: Path, base_sessions: int, formats: list[int], sizes: list[int],
         many: list[int], random_ids: list[int]) -> Iterator[tuple[str, int, int, Path]]:
    for fmt in formats:
        base = base_log(cache, base_sessions, fmt)
        for label, layout, counts in (("one log", "log", sizes), ("many files", "files", many),
                                      ("random ids", "random", random_ids)):
            for n in sorted(counts):
                yield label, fmt, n, replicated(cache, base, base_sessions, fmt, n, layout)


def report(runs: list[Run]) -> None:
    """The ratios, and a failure when a log's samples differ between runs of the same sessions."""
    # (Logs of hashed ids hold other session ids: their samples are compared among themselves.)
    digests: dict[tuple[int, bool], set[str]] = {}
    for run in runs:
        digests.setdefault((run.sessions, run.label == "random ids"), set()).add(run.digest)
    different = sorted(n for (n, _), found in digests.items() if len(found) > 1)
    peak = {(r.label, r.fmt, r.sessions, r.workers): r for r in runs}
    print()
    print(f"{'ratio':<44} {'RSS':>6} {'PSS':>6}")
    for (label, fmt, n, workers), run in peak.items():
        one = peak.get((label, fmt, n, 1))
        if workers != 1 and one is not None:
            name = f"{label}, v{fmt}, {n:,}: {workers} workers / 1"
            print(f"{name:<44} {run.rss / one.rss:>6.2f} {run.pss / one.pss:>6.2f}")
    for label in ("one log", "many files", "random ids"):
        for fmt in (1, 2):
            for large, small in GROWTH:
                a, b = peak.get((label, fmt, large, 1)), peak.get((label, fmt, small, 1))
                if a is not None and b is not None:
                    name = f"{label}, v{fmt}, 1 worker: {large:,} / {small:,}"
                    print(f"{name:<44} {a.rss / b.rss:>6.2f} {a.pss / b.pss:>6.2f}")
    if different:
        raise SystemExit(f"samples differ between runs of the same sessions: {different}")
    print("samples: byte-identical across workers, formats and layouts")


if __name__ == "__main__":
    main()
