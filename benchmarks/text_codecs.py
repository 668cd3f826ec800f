"""What the zstd level of the text columns alone does to a format-2 log's size.

    python benchmarks/text_codecs.py LOGS-V2 [--levels 1 3 9 19]

Rewrites every turns file of LOGS-V2 (a format-2 log, e.g. compact.py's
cached ``logs-v2``) into a temporary folder: the same row groups and
encodings as tito's writer (``capture/row_groups.py``: ids and logprobs
byte-stream-split, the rest with a dictionary), every column at zstd's
default level except ``prompt_messages`` and ``response_message``, which get
each level asked for. Prints, per level, the files' total size (MiB and
bytes), the text columns' compressed bytes and the CPU seconds of the
rewrite; at level 1, pyarrow's default, the size is the log's as written. Sessions files
are left out of the totals (they are the same at every level).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import pyarrow.parquet as pq

from tito_cli.capture.row_groups import SPLIT_COLUMNS

TEXT_COLUMNS = ("prompt_messages", "response_message")


def rewrite(files: list[Path], folder: Path, level: int) -> tuple[int, int, float]:
    """Write ``files`` into ``folder`` with the text columns at zstd ``level``: total bytes, text bytes, CPU s."""
    total = text = 0
    start = time.process_time()
    for number, path in enumerate(files):
        source = pq.ParquetFile(path)
        paths = [column.path for column in source.schema]
        names = source.schema_arrow.names
        out = folder / f"{number}.parquet"
        options = {
            "compression": "zstd",
            "compression_level": {p: level for p in paths if p in TEXT_COLUMNS},
            "use_dictionary": [n for n in names if n not in SPLIT_COLUMNS],
            "column_encoding": {f"{n}.list.element": "BYTE_STREAM_SPLIT" for n in SPLIT_COLUMNS if n in names},
        }
        with pq.ParquetWriter(out, source.schema_arrow, **options) as writer:
            for group in range(source.metadata.num_row_groups):
                writer.write_table(source.read_row_group(group, use_threads=False))
        total += out.stat().st_size
        meta = pq.ParquetFile(out).metadata
        for g in range(meta.num_row_groups):
            for c in range(meta.num_columns):
                chunk = meta.row_group(g).column(c)
                if chunk.path_in_schema in TEXT_COLUMNS:
                    text += chunk.total_compressed_size
    return total, text, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("logs", type=Path, help="a format-2 log folder")
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 3, 9, 19], help="zstd levels for the text")
    args = parser.parse_args()
    files = [p for p in sorted(args.logs.rglob("*.parquet")) if "prompt_ids" in pq.ParquetFile(p).schema_arrow.names]
    written = sum(p.stat().st_size for p in files)
    print(f"{len(files)} turns files, {written / 2**20:.2f} MiB ({written} bytes) as written")
    print(f"{'text level':>10} {'files MiB':>10} {'text MB':>8} {'CPU s':>7} {'files bytes':>12}")
    for level in args.levels:
        with tempfile.TemporaryDirectory(prefix="tito-codecs-") as tmp:
            total, text, cpu = rewrite(files, Path(tmp), level)
        print(f"{level:>10} {total / 2**20:>10.2f} {text / 1e6:>8.2f} {cpu:>7.2f} {total:>12}")


if __name__ == "__main__":
    main()
