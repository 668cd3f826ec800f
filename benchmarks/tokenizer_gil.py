"""Does a tokenizer call in a worker thread hold the event loop?  ``encode`` against ``encode_batch``.

    python benchmarks/tokenizer_gil.py [--words 30000] [--calls 15]

A loop task sleeps 1 ms over and over and records how late it wakes, while the loop awaits
``--calls`` encodes of one ~``--words``-token text in the default thread pool (as the gateway's
worker pool runs them). The fast tokenizer's ``encode`` keeps the GIL for the whole call, so the loop
waits for it; ``encode_batch`` releases it while Rust tokenizes. Printed per entry point: wall time
and CPU time per call, loop lag p99 and max.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from tokenizers import Tokenizer

QWEN3 = Path(__file__).resolve().parent.parent / "fixtures" / "tokenizers" / "qwen3" / "tokenizer.json"
WORDS = "the quick brown fox jumps over lazy dog while seven wizards quietly judge boxing matches".split()


async def measure(fn: object, calls: int) -> tuple[float, float, float, float]:
    lags: list[float] = []
    done = False

    async def probe() -> None:
        while not done:
            began = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - began - 0.001)

    task = asyncio.create_task(probe())
    loop = asyncio.get_running_loop()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(calls):
        await loop.run_in_executor(None, fn)  # type: ignore[arg-type]
    wall, cpu = (time.perf_counter() - wall) / calls, (time.process_time() - cpu) / calls
    done = True
    await task
    lags.sort()
    return wall, cpu, lags[int(0.99 * len(lags))], lags[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--words", type=int, default=30_000)
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()
    backend = Tokenizer.from_file(str(QWEN3))
    text = "<|im_start|>user\n" + " ".join(WORDS[i % len(WORDS)] for i in range(args.words)) + "<|im_end|>\n"
    entries = {
        "encode": lambda: backend.encode(text, add_special_tokens=False),
        "encode_batch": lambda: backend.encode_batch([text], add_special_tokens=False),
    }
    print(f"{'entry point':<14}{'wall ms':>9}{'cpu ms':>9}{'lag p99 ms':>12}{'lag max ms':>12}")
    for name in [*entries, *entries]:  # twice, interleaved
        wall, cpu, p99, worst = asyncio.run(measure(entries[name], args.calls))
        print(f"{name:<14}{wall * 1e3:>9.1f}{cpu * 1e3:>9.1f}{p99 * 1e3:>12.1f}{worst * 1e3:>12.1f}")


if __name__ == "__main__":
    main()
