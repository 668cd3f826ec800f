"""How much a golden dump costs on top of the rebuild it describes.

    python benchmarks/golden_dump.py [LOGS] [--repeat N]

Prints the median wall time of rebuilding every session of LOGS (default
fixtures/logs), of rebuilding and dumping them (tokens decoded), and of a full
``check_goldens`` against a fresh set of dumps, plus the ratios.  The
tokenizer is loaded once, outside the timings (transformers' import dominates
a cold start and is the same for every command).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tito_cli.golden.compare import GoldenOptions, check_goldens, write_dumps  # noqa: E402
from tito_cli.golden.serialize import TokenWords, dump_session, golden_token_text  # noqa: E402
from tito_cli.run.corpus import Corpus  # noqa: E402


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", nargs="?", default=str(REPO / "fixtures" / "logs"))
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    options = GoldenOptions()
    corpus = Corpus.open([args.logs])
    tokens = TokenWords(golden_token_text(corpus.tokenizer, [Path(args.logs)]))  # as iter_dumps does
    tokens.words(range(100))  # loaded and warm now, not inside a timing

    def rebuild() -> None:
        for _ in Corpus.open([args.logs]).results(options.policy):
            pass

    lines = 0

    def rebuild_and_dump() -> None:
        nonlocal lines
        lines = 0
        for result in Corpus.open([args.logs]).results(options.policy):
            lines += dump_session(result, options.policy, tokens).count("\n")

    with tempfile.TemporaryDirectory() as tmp:
        write_dumps([args.logs], tmp, options)  # also warms the tokenizer cache of this process

        def check() -> None:
            assert check_goldens([args.logs], tmp, options).ok

        t_rebuild = median_time(rebuild, args.repeat)
        t_dump = median_time(rebuild_and_dump, args.repeat)
        t_check = median_time(check, args.repeat)

    sessions = len(corpus.session_ids())
    print(f"log: {args.logs} ({sessions} sessions, {lines} dump lines), median of {args.repeat}")
    print(f"rebuild only          {t_rebuild * 1000:8.1f} ms")
    print(f"rebuild + dump        {t_dump * 1000:8.1f} ms   ({t_dump / t_rebuild:.2f}x rebuild)")
    print(f"check_goldens         {t_check * 1000:8.1f} ms   ({t_check / t_rebuild:.2f}x rebuild)")


if __name__ == "__main__":
    main()
