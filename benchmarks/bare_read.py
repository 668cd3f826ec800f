"""The I/O floor: read the columns a rebuild reads, as it reads them, with pyarrow, and nothing else.

    python benchmarks/bare_read.py LOGS [--threads] [--whole]

Decodes every turns file's columns row group by row group (a rebuild reads a
row group when a session needs it and drops it after the batch's last session
that does: ``tito_cli/read/rows.py``), each dropped before the next is read;
sessions files are read whole, as the sessions table reads them.
Single-threaded by default, like one rebuild worker (one worker, one core);
``--threads`` lets pyarrow decode with all cores, for reference.  ``--whole``
reads each file whole instead, the floor before 2026-12-02: it holds a whole
format-1 file's decoded columns at once, which on the qwen3 workload cost
about a second of system time (fresh pages) that no rebuild pays.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

# The native options tito's command line runs pyarrow with, set before pyarrow loads: the floor gets
# what tito gets.  The module is run from its file, not imported: importing tito_cli.cli would load
# the whole command line (typer, rich, numpy), which the floor does not pay for.
runpy.run_path(str(Path(__file__).resolve().parent.parent / "tito_cli" / "cli" / "native_env.py"))

import pyarrow.parquet as pq  # noqa: E402 - after the options, which pyarrow reads as it loads

# The turns columns tito's reader asks for (tito_cli.read.files.READ_COLUMNS; format 2's reference
# columns when the file has them); sessions files are read whole.
TURNS_COLUMNS = [
    "session_id", "seq", "prompt_ids", "output_ids", "output_logprobs",
    "finish_reason", "prompt_messages", "response_message", "tools", "metadata",
    "base_seq", "shared_prompt_ids", "shared_messages",
]


def read_log(folder: Path, threads: bool = False, whole: bool = False) -> int:
    """Decode every file of ``folder`` as a rebuild reads it (turns files: its columns); the rows read."""
    rows = 0
    for path in sorted(folder.rglob("*.parquet")):
        with pq.ParquetFile(path) as parquet:
            names = parquet.schema_arrow.names
            if "prompt_ids" not in names:
                rows += parquet.read(use_threads=threads).num_rows  # a sessions file
                continue
            columns = [c for c in TURNS_COLUMNS if c in names]
            if whole:
                rows += parquet.read(columns=columns, use_threads=threads).num_rows
                continue
            for group in range(parquet.metadata.num_row_groups):
                rows += parquet.read_row_group(group, columns=columns, use_threads=threads).num_rows
    return rows


def main() -> None:
    print(read_log(Path(sys.argv[1]), threads="--threads" in sys.argv[2:], whole="--whole" in sys.argv[2:]))


if __name__ == "__main__":
    main()
