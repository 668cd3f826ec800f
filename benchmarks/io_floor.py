"""The I/O floor of a rebuild: read the log's columns and write the samples table, with pyarrow alone.

    python benchmarks/io_floor.py LOGS SAMPLES.parquet OUT.parquet

Reads the columns a rebuild reads from every turns file (one thread, like one
rebuild worker), then writes ``SAMPLES.parquet``'s table (a rebuild's own
output, loaded first) to ``OUT.parquet`` as tito's samples writer does
(zstd). Prints the seconds spent loading SAMPLES, which is not part of the
floor: the caller subtracts it from the process's time.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
from bare_read import TURNS_COLUMNS


def main() -> None:
    logs, samples, out = (Path(a) for a in sys.argv[1:4])
    start = time.perf_counter()
    table = pq.read_table(samples, use_threads=False)
    loading = time.perf_counter() - start
    for path in sorted(logs.rglob("*.parquet")):
        parquet = pq.ParquetFile(path)
        names = parquet.schema_arrow.names
        wanted = [c for c in TURNS_COLUMNS if c in names] if "prompt_ids" in names else None
        parquet.read(columns=wanted, use_threads=False)
    pq.write_table(table, out, compression="zstd")
    print(f"{loading:.6f}")


if __name__ == "__main__":
    main()
