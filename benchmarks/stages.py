"""Where a 1-worker rebuild's time goes, stage by stage, timed in-process.

    python benchmarks/stages.py LOGS [--runs 5]

Each run is its own process (``python benchmarks/stages.py --one LOGS``):
it imports tito's command line, wraps the functions that do each stage
with a timer (validation ``run.corpus.parse_session``, routing and
linearizing ``run.corpus.rebuild_session``, sample tables
``run.corpus.session_table``, decoding ``read.rows._load_group``, writing
``export.parquet.StreamedParquetFile._write_row_group``) and runs ``tito
rebuild LOGS --workers 1``.  Prints the medians over the runs of each stage's
seconds and its share of the whole (imports included), the rest being what
no timer covers: the index pass, handing out rows, breaking each session's
cycles, the summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

STAGES = {
    "decoding row groups, building column views": ("tito_cli.read.rows", None, "_load_group"),
    "validation (rows into turns)": ("tito_cli.run.corpus", None, "parse_session"),
    "routing and linearizing": ("tito_cli.run.corpus", None, "rebuild_session"),
    "sample tables": ("tito_cli.run.corpus", None, "session_table"),
    "writing the samples file": ("tito_cli.export.parquet", "StreamedParquetFile", "_write_row_group"),
}


def one(logs: Path, out: Path) -> dict[str, float]:
    """Run one timed rebuild in this process; seconds per stage, ``imports`` and ``whole``."""
    import importlib

    start = time.perf_counter()
    from tito_cli.cli import _app, main

    _app("rebuild")  # what ``tito rebuild`` imports before it starts (a command imports its own module)

    seconds = {"imports": time.perf_counter() - start, **{name: 0.0 for name in STAGES}}
    for name, (module_name, owner, attribute) in STAGES.items():
        target = importlib.import_module(module_name)
        if owner is not None:
            target = getattr(target, owner)
        original = getattr(target, attribute)

        def timed(*args, _original=original, _name=name, **kwargs):  # type: ignore[no-untyped-def]
            began = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                seconds[_name] += time.perf_counter() - began

        setattr(target, attribute, timed)
    sys.argv = ["tito", "rebuild", str(logs), "--out", str(out), "--workers", "1", "--overwrite"]
    try:
        main()
    except SystemExit as exit:
        if exit.code:
            raise
    seconds["whole"] = time.perf_counter() - start
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", type=Path, help="the turn-log folder to rebuild")
    parser.add_argument("--runs", type=int, default=5, help="processes to run (default 5)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        with tempfile.TemporaryDirectory(prefix="tito-stages-") as tmp:
            print(json.dumps(one(args.logs.resolve(), Path(tmp) / "samples.parquet")))
        return
    runs = []
    for _ in range(args.runs):
        done = subprocess.run(
            [sys.executable, __file__, "--one", str(args.logs)],
            cwd=REPO, capture_output=True, text=True, check=True,
        )
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    median = {name: statistics.median(r[name] for r in runs) for name in runs[0]}
    whole = median.pop("whole")
    print(f"{args.logs}, {args.runs} runs, medians")
    print(f"{'':46}{'seconds':>9}{'share':>8}")
    for name, value in median.items():
        print(f"{name:46}{value:>9.3f}{value / whole:>8.0%}")
    rest = whole - sum(median.values())
    print(f"{'the rest':46}{rest:>9.3f}{rest / whole:>8.0%}")
    print(f"{'whole run':46}{whole:>9.3f}{1:>8.0%}")


if __name__ == "__main__":
    main()
