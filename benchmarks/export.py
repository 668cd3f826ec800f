"""Peak memory and time of ``tito export`` as the samples file grows: bounded by a row group, not the file.

    python benchmarks/export.py                 # 1x and 32x the demo samples, 3 runs each
    python benchmarks/export.py --copies 16 --runs 5

The demo log's samples are rebuilt once and copied ``copies`` times (renamed
sessions and groups) into a samples file written in row groups as
``tito rebuild`` writes them.  Each export runs in a fresh process, which
reports its own peak RSS; the 1x file is the baseline measured in the same
run.  For SkyRL and TRL (streamed a row group at a time) the peak should not
grow with the file; for slime without ``--split-by`` it grows with the one
dump (``torch.save`` needs it whole), with ``--split-by`` it stays at one
dump of N groups.  Prints medians and ratios against the 1x baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEMO = REPO / "fixtures" / "logs"

CHILD = r"""
import json, resource, sys, time
from tito_cli.run.export import export_samples
source, out, fmt, split = sys.argv[1:5]
started = time.perf_counter()
options = {"split_by": int(split) if split != "-" else None, "logprobs": "keep"} if fmt == "slime" else None
export_samples(source, out, fmt, options, overwrite=True)
elapsed = time.perf_counter() - started
print(json.dumps({"seconds": elapsed, "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""

CASES = [("skyrl", None), ("trl", None), ("slime", 8), ("slime", None)]


def make_samples(folder: Path, copies: int) -> Path:
    """The demo's samples, ``copies`` times over, in session-id order and the rebuild's row groups."""
    sys.path.insert(0, str(REPO))
    from tito_cli.run.rebuild import rebuild

    base = folder / "demo.parquet"
    if not base.exists():
        rebuild([DEMO], base, workers=1)
    table = pq.read_table(base)
    groups = table.column("group_index")
    offset = (pc.max(groups).as_py() or 0) + 1
    parts = []
    for c in range(copies):
        ids = pc.binary_join_element_wise(pa.scalar(f"c{c:04d}-"), table.column("session_id"), "")
        part = table.set_column(0, "session_id", ids)
        part = part.set_column(
            part.schema.get_field_index("group_index"), "group_index", pc.add(groups, c * offset)
        )
        parts.append(part)
    out = folder / f"samples-x{copies}.parquet"
    pq.write_table(pa.concat_tables(parts), out, row_group_size=max(table.num_rows // 2, 1), compression="zstd")
    return out


def measure(source: Path, fmt: str, split: int | None, folder: Path) -> dict[str, float]:
    target = folder / ("rollout_{rollout_id}.pt" if split else f"out.{fmt}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(source), str(target), fmt, str(split or "-")],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=32, help="the big file is this many demo samples (default 32)")
    parser.add_argument("--runs", type=int, default=3, help="runs per case; medians are printed (default 3)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tito-export-bench-") as tmp:
        folder = Path(tmp)
        small, big = make_samples(folder, 1), make_samples(folder, args.copies)
        print(f"samples: {pq.ParquetFile(small).metadata.num_rows} (1x) and {pq.ParquetFile(big).metadata.num_rows} "
              f"({args.copies}x); medians of {args.runs} runs, each in a fresh process")
        print(f"{'format':<18}{'1x MiB':>9}{f'{args.copies}x MiB':>10}{'ratio':>7}{'1x s':>8}{f'{args.copies}x s':>8}")
        for fmt, split in CASES:
            rows = {}
            for name, source in (("small", small), ("big", big)):
                runs = [measure(source, fmt, split, folder) for _ in range(args.runs)]
                rows[name] = {k: statistics.median(r[k] for r in runs) for k in ("peak_mib", "seconds")}
            label = fmt + (f" --split-by {split}" if split else "")
            ratio = rows["big"]["peak_mib"] / rows["small"]["peak_mib"]
            print(
                f"{label:<18}{rows['small']['peak_mib']:>9.0f}{rows['big']['peak_mib']:>10.0f}{ratio:>7.2f}"
                f"{rows['small']['seconds']:>8.2f}{rows['big']['seconds']:>8.2f}"
            )


if __name__ == "__main__":
    main()
