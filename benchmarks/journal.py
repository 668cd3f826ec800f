"""The write-ahead journal's own cost per turn: the check every turn had anyway, then encode + append (+ fsync).

    python benchmarks/journal.py [--turns 100]

Turns with 8k- and 32k-token prompts (random ids) and 30 kB / 120 kB of prompt messages, 200 output ids
with logprobs, appended to a journal in a temporary folder (on the machine's temporary file system) with
and without ``fsync``. Prints the medians in milliseconds.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from tito_cli.capture.journal import Journal, encode_turn
from tito_cli.capture.writer import RecordedTurn


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=100)
    args = parser.parse_args()
    rng = random.Random(1)
    print(f"{'prompt':>8} {'messages':>9} {'fsync':>6} {'check ms':>9} {'journal ms':>11}")
    for tokens, size in ((8_000, 30_000), (32_000, 120_000)):
        prompt = [rng.randrange(150_000) for _ in range(tokens)]
        messages = [{"role": "user", "content": "x" * size}]
        with tempfile.TemporaryDirectory(prefix="tito-journal-bench-") as folder:
            for fsync in (False, True):
                journal = Journal(Path(folder), f"bench-{int(fsync)}", tokenizer=None, fsync=fsync)
                checks, appends = [], []
                for seq in range(args.turns):
                    turn = RecordedTurn(
                        "s", prompt, list(range(200)), [-0.5] * 200, "stop", messages, {"role": "assistant"}
                    )
                    start = time.perf_counter()
                    checked = turn.check()
                    middle = time.perf_counter()
                    checked.row["seq"] = seq
                    checked.row["timestamp"] = datetime.now(timezone.utc)
                    journal.append(encode_turn(checked.row))
                    appends.append(time.perf_counter() - middle)
                    checks.append(middle - start)
                journal.close()
                print(
                    f"{tokens:>8,} {size:>9,} {fsync!s:>6} {statistics.median(checks) * 1e3:>9.3f} "
                    f"{statistics.median(appends) * 1e3:>11.3f}"
                )


if __name__ == "__main__":
    main()
