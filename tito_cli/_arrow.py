"""Arrow arrays to and from numpy, built from buffers.

``pa.array(...)`` and ``Array.to_numpy()`` probe for pandas, and the first
probe imports it: half a second or more, which is more than a small log's
whole rebuild and a third of the budget on the benchmark workload.  The hot
paths (the turn-log reader, the samples writer) build and read arrays
through these helpers instead, which touch only buffers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import accumulate
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "NUMPY_TYPES",
    "NotUtf8",
    "common_prefix",
    "list_array",
    "list_column",
    "numpy_view",
    "primitive_array",
    "same_values",
    "string_array",
    "strings",
    "validity",
]

NUMPY_TYPES: dict[pa.DataType, Any] = {
    pa.int8(): np.int8,
    pa.int16(): np.int16,
    pa.int32(): np.int32,
    pa.int64(): np.int64,
    pa.uint8(): np.uint8,
    pa.uint16(): np.uint16,
    pa.uint32(): np.uint32,
    pa.uint64(): np.uint64,
    pa.float16(): np.float16,
    pa.float32(): np.float32,
    pa.float64(): np.float64,
}


def numpy_view(buffer: pa.Buffer | None, dtype: type, offset: int, count: int) -> np.ndarray:
    """``count`` values of ``dtype`` from ``buffer``, starting at element ``offset``, without a copy."""
    if buffer is None or count == 0:
        return np.zeros(count, dtype=dtype)
    return np.frombuffer(buffer, dtype=dtype, count=offset + count)[offset:]


def all_finite(values: np.ndarray) -> bool:
    """Whether every value of a float array is finite (no NaN, no infinity)."""
    if values.dtype.itemsize <= 4:
        # A float64 sum of float32 values cannot overflow (2**31 of them at most), so it
        # is finite exactly when every value is: one pass, no temporary array.
        return math.isfinite(values.sum(dtype=np.float64))
    return bool(np.isfinite(values).all())


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two arrays hold the same values; for integers of one dtype, one ``memcmp``.

    pyarrow's ``Buffer.equals`` stops at the first difference.
    ``np.array_equal`` writes a boolean per element, then scans them, and
    never stops early: the reader compares a prompt's text with several
    earlier prompts' (hundreds of kilobytes each) to find the one it extends,
    and most candidates differ within a few bytes.  Equal bytes mean equal
    values only for integers of one dtype: anything else (floats, booleans,
    mixed dtypes, strided views) is compared by numpy.
    """
    if a.shape != b.shape:
        return False
    if a.dtype == b.dtype and a.dtype.kind in "iu" and a.flags.c_contiguous and b.flags.c_contiguous:
        return bool(pa.py_buffer(a).equals(pa.py_buffer(b)))
    return bool(np.array_equal(a, b))


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """The length of the common prefix of two 1-d arrays."""
    n = min(len(a), len(b))
    # Usually all of the shorter one is shared (a clean turn): one memcmp says so.
    if same_values(a[:n], b[:n]):
        return n
    return int((a[:n] != b[:n]).argmax())


def validity(array: pa.Array) -> np.ndarray:
    """The array's validity as booleans."""
    if array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    bitmap = array.buffers()[0]
    if bitmap is None:  # a null-typed array
        return np.zeros(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(bitmap, dtype=np.uint8), bitorder="little")
    return bits[array.offset : array.offset + len(array)].astype(bool)


def true_cells(array: pa.Array) -> np.ndarray:
    """A boolean (or null-typed) array as booleans: true where the cell is true, false where false or null."""
    if pa.types.is_null(array.type) or len(array) == 0:
        return np.zeros(len(array), dtype=bool)
    data = array.buffers()[1]
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    values: np.ndarray = bits[array.offset : array.offset + len(array)].astype(bool)
    values &= validity(array)
    return values


def _bitmap(valid: np.ndarray) -> pa.Buffer | None:
    if valid.all():
        return None
    return pa.py_buffer(np.packbits(valid, bitorder="little"))


def primitive_array(values: np.ndarray | Sequence[float | int | None], type: pa.DataType) -> pa.Array:
    """A numeric array; ``None`` entries (in a sequence) become nulls."""
    dtype = NUMPY_TYPES[type]
    if isinstance(values, np.ndarray):
        contiguous = np.ascontiguousarray(values, dtype=dtype)
        return pa.Array.from_buffers(type, len(contiguous), [None, pa.py_buffer(contiguous)])
    if None not in values:
        data = np.array(values, dtype=dtype)
        return pa.Array.from_buffers(type, len(data), [None, pa.py_buffer(data)], null_count=0)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    data = np.array([0 if v is None else v for v in values], dtype=dtype)
    nulls = int(len(values) - valid.sum())
    return pa.Array.from_buffers(type, len(data), [_bitmap(valid), pa.py_buffer(data)], null_count=nulls)


def string_array(values: Sequence[str | None]) -> pa.Array:
    """A ``string`` array; ``None`` entries become nulls."""
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    offsets = np.fromiter(accumulate(map(len, encoded), initial=0), dtype=np.int32, count=len(encoded) + 1)
    data = pa.py_buffer(b"".join(encoded))
    if None not in values:
        # The usual case (a samples table's columns are rarely null): no validity to build.
        return pa.Array.from_buffers(pa.string(), len(encoded), [None, pa.py_buffer(offsets), data], null_count=0)
    valid = np.fromiter((v is not None for v in values), dtype=bool, count=len(values))
    buffers = [_bitmap(valid), pa.py_buffer(offsets), data]
    nulls = int(len(values) - valid.sum())
    return pa.Array.from_buffers(pa.string(), len(encoded), buffers, null_count=nulls)


def list_array(parts: Sequence[np.ndarray | None], value_type: pa.DataType) -> pa.Array:
    """A ``list<value_type>`` array with one entry per numpy array; ``None`` entries become nulls."""
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    np.cumsum([0 if p is None else len(p) for p in parts], out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise OverflowError("a list column holds more than 2**31 values")
    dtype = NUMPY_TYPES[value_type]
    present = [p for p in parts if p is not None]
    values = np.concatenate(present).astype(dtype, copy=False) if present else np.zeros(0, dtype=dtype)
    child = primitive_array(values, value_type)
    valid = np.fromiter((p is not None for p in parts), dtype=bool, count=len(parts))
    return pa.ListArray.from_buffers(
        pa.list_(value_type),
        len(parts),
        [_bitmap(valid), pa.py_buffer(offsets.astype(np.int32))],
        null_count=int(len(parts) - valid.sum()),
        children=[child],
    )


def list_column(parts: Sequence[np.ndarray], value_type: pa.DataType) -> pa.ChunkedArray:
    """A ``list<value_type>`` column with one entry per numpy array, in the arrays' own memory.

    One chunk per entry, so nothing is copied into a shared values buffer (for
    the samples table that would copy every token of every sample once more).
    The Parquet and IPC writers stream chunks: what they write is the same.
    """
    list_type = pa.list_(value_type)
    chunks = []
    for part in parts:
        values = primitive_array(part, value_type)  # a view when the dtype already matches
        offsets = pa.py_buffer(np.array([0, len(values)], dtype=np.int32))
        chunks.append(pa.ListArray.from_buffers(list_type, 1, [None, offsets], children=[values]))
    return pa.chunked_array(chunks, type=list_type)


class NotUtf8:
    """A string cell whose bytes are not UTF-8 (Parquet does not check them), for the caller to reject."""

    __slots__ = ("position",)

    def __init__(self, position: int) -> None:
        self.position = position  # of the first bad byte

    def __str__(self) -> str:
        return f"not valid UTF-8 (byte {self.position})"


def strings(array: pa.Array) -> list[str | NotUtf8 | None]:
    """A string column's cells as Python strings, a :class:`NotUtf8` for each cell that is not UTF-8."""
    try:
        values: list[str | NotUtf8 | None] = array.to_pylist()
        return values
    except UnicodeDecodeError:
        pass
    binary = array.view(pa.large_binary() if pa.types.is_large_string(array.type) else pa.binary())
    cells: list[str | NotUtf8 | None] = []
    for raw in binary.to_pylist():
        try:
            cells.append(None if raw is None else raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            cells.append(NotUtf8(exc.start))
    return cells
