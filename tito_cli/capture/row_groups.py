"""Parquet files cut into row groups bounded by rows and by bytes.

A reader decodes a row group whole when it is small enough (``read/rows.py``:
larger ones, from other writers, in slices), so a row group's size is its
working set: bounding it by bytes, not only by rows, keeps that bounded for
files tito writes whatever the prompts' lengths, and lets them be read whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from .._arrow import numpy_view
from .._parquet import parquet_writer

__all__ = ["ROW_GROUP_BYTES", "ROW_GROUP_ROWS", "SPLIT_COLUMNS", "row_bytes", "row_group_bounds", "write_row_groups"]

#: Default bounds of a row group tito writes.  The bytes bound (decoded cells) sets a reader's
#: memory: decoding a row group passes through several times its decoded size, and pyarrow's
#: allocator keeps that high-water mark (cli/native_env.py), so with 64 MiB a 1-worker rebuild
#: of a format-2 log kept growing over its first row groups (docs/performance.md, "Where memory can still grow").
ROW_GROUP_ROWS = 1024
ROW_GROUP_BYTES = 8 << 20


def row_bytes(table: pa.Table) -> np.ndarray:
    """Each row's decoded size in bytes, counting its list values and string bytes (fixed-width cells ignored)."""
    sizes = np.zeros(table.num_rows, dtype=np.int64)
    for column in table.columns:
        array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        kind = array.type
        if pa.types.is_list(kind) and pa.types.is_primitive(kind.value_type):
            width = kind.value_type.bit_width // 8
        elif pa.types.is_string(kind) or pa.types.is_binary(kind):
            width = 1
        else:
            continue
        offsets = numpy_view(array.buffers()[1], np.int32, array.offset, len(array) + 1)
        sizes += width * np.diff(offsets.astype(np.int64))
    return sizes


def row_group_bounds(sizes: np.ndarray, max_rows: int, max_bytes: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive row groups: at most ``max_rows`` rows each, and at most
    ``max_bytes`` bytes unless one row alone is larger (it then has a row group of its own)."""
    bounds: list[tuple[int, int]] = []
    start, size = 0, 0
    for row, row_size in enumerate(sizes.tolist()):
        if row > start and (row - start >= max_rows or size + row_size > max_bytes):
            bounds.append((start, row))
            start, size = row, 0
        size += row_size
    if start < len(sizes):
        bounds.append((start, len(sizes)))
    return bounds


#: Numeric list columns stored byte-stream-split (docs/spec.md §9.4): token ids and logprobs are
#: near-random numbers whose high bytes vary little; split into byte planes, the compressor sees
#: that.  For random ids it is the difference between about 1.1x and 1.3x their entropy.
SPLIT_COLUMNS = ("prompt_ids", "output_ids", "output_logprobs")


def write_row_groups(
    table: pa.Table, path: Path, compression: str, max_rows: int, max_bytes: int, *, split_numbers: bool = False
) -> None:
    """Write ``table`` to ``path`` in row groups bounded by :func:`row_group_bounds`.

    ``split_numbers``: store :data:`SPLIT_COLUMNS` with the ``BYTE_STREAM_SPLIT``
    encoding (readers need Parquet 2.11's support for it on integers: pyarrow
    16 or later), everything else as pyarrow does by default.
    """
    options: dict[str, object] = {}
    if split_numbers:
        split = [name for name in SPLIT_COLUMNS if name in table.column_names]
        options["use_dictionary"] = [name for name in table.column_names if name not in split]
        options["column_encoding"] = {f"{name}.list.element": "BYTE_STREAM_SPLIT" for name in split}
    with parquet_writer(path, table.schema, compression=compression, **options) as writer:
        for start, stop in row_group_bounds(row_bytes(table), max_rows, max_bytes):
            writer.write_table(table.slice(start, stop - start), row_group_size=stop - start)
