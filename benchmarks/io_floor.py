"""The I/O floor of a rebuild: read the log's columns and write the samples file, with pyarrow alone.

    python benchmarks/io_floor.py LOGS SAMPLES.parquet OUT.parquet [LOADING.txt]

What no rebuild can avoid: decoding the columns a rebuild reads, row group by
row group as a rebuild reads them (``bare_read.read_log``: one thread, like
one rebuild worker, each row group dropped before the next), and writing the
samples it produces: ``SAMPLES.parquet`` (a rebuild's own output, loaded
first) is written to ``OUT.parquet`` as tito's samples writer wrote it: the
same row groups, zstd, a dictionary and statistics for exactly the columns
that have them in SAMPLES (read back from its metadata, so the floor follows
the writer's options without importing tito).  Prints the wall and CPU
seconds spent loading SAMPLES, which are not part of the floor, and writes
them to LOADING.txt when given: the caller subtracts them from the process's
wall and CPU time, measured in the same run (a separate run's loading time is
another moment of the machine).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

# First: bare_read sets the allocator option tito runs pyarrow with, before pyarrow loads.
from bare_read import read_log

# isort: split
import pyarrow.parquet as pq


def writer_options(samples: pq.ParquetFile) -> dict[str, list[str]]:
    """The dictionary and statistics columns of ``samples``'s first row group, as ParquetWriter options."""
    meta = samples.metadata
    if meta.num_row_groups == 0:
        return {}
    group = meta.row_group(0)
    # A list column's chunk is named "tokens.list.element"; the writer's options take the top-level name.
    chunks = [(c.path_in_schema.split(".")[0], c) for c in map(group.column, range(group.num_columns))]
    return {
        "use_dictionary": [name for name, c in chunks if c.has_dictionary_page],
        "write_statistics": [name for name, c in chunks if c.is_stats_set],
    }


def main() -> None:
    logs, samples_path, out = (Path(a) for a in sys.argv[1:4])
    start, start_cpu = time.perf_counter(), time.process_time()
    samples = pq.ParquetFile(samples_path)
    groups = [samples.read_row_group(g, use_threads=False) for g in range(samples.metadata.num_row_groups)]
    options = writer_options(samples)
    loading = f"{time.perf_counter() - start:.6f} {time.process_time() - start_cpu:.6f}"
    read_log(logs)
    with pq.ParquetWriter(out, samples.schema_arrow, compression="zstd", **options) as writer:
        for group in groups:
            writer.write_table(group)
    print(loading)
    if len(sys.argv) > 4:
        Path(sys.argv[4]).write_text(loading + "\n")


if __name__ == "__main__":
    main()
