"""What counting forks and realigns by drift class adds to a rebuild.

    python benchmarks/drift_classes.py [LOGS] [--repeat N] [--workers N]

Prints the median wall time of ``rebuild()`` over LOGS (default
fixtures/logs) without the count and with it (``--drift-classes``), the
ratio, and the parts of the difference: loading the log's tokenizer
decode-only (once a process) and classifying every fork and realign.  All
runs are in this one process and alternate, so a slow spell of a shared
machine falls on both.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tito_cli.report.drift import DriftClassCounter, divergences, drift_class_counter  # noqa: E402
from tito_cli.run.corpus import Corpus  # noqa: E402
from tito_cli.run.rebuild import rebuild  # noqa: E402
from tito_cli.tokenizer import TokenText, load_decoder, resolve  # noqa: E402
from tito_cli.turns import Reject  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="?", default=str(REPO / "fixtures" / "logs"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()
    logs = [Path(args.logs)]
    counter = functools.partial(drift_class_counter, log_dirs=logs)
    times: dict[str, list[float]] = {"without": [], "with": []}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "samples.parquet"
        for _ in range(args.repeat):
            for name, drift in (("without", None), ("with", counter)):
                DriftClassCounter._decoders.clear()  # each run pays the load, as each CLI run does
                start = time.perf_counter()
                rebuild(logs, out, overwrite=True, workers=args.workers, drift_counter=drift)
                times[name].append(time.perf_counter() - start)

    corpus = Corpus.open(logs)
    if corpus.tokenizer is None:
        raise SystemExit("the log records no tokenizer: nothing to classify")
    folder = resolve(corpus.tokenizer, logs)
    loads = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        text = TokenText(load_decoder(folder))
        loads.append(time.perf_counter() - start)
    results = [r for r in corpus.results() if not isinstance(r, Reject)]
    start = time.perf_counter()
    classified = sum(len(divergences(r, text)) for r in results)
    classify = time.perf_counter() - start

    without, with_ = statistics.median(times["without"]), statistics.median(times["with"])
    print(f"log: {args.logs} ({len(results)} sessions, tokenizer {corpus.tokenizer}), workers {args.workers}")
    print(f"rebuild without drift classes   {without:7.3f} s  (median of {args.repeat})")
    print(f"rebuild with drift classes      {with_:7.3f} s  ratio {with_ / without:.2f}")
    print(f"  tokenizer load, decode-only   {statistics.median(loads):7.3f} s  (once per process)")
    each = 1000 * classify / max(classified, 1)
    print(f"  classifying {classified:5d} divergences {classify:7.3f} s  ({each:.2f} ms each)")


if __name__ == "__main__":
    main()
