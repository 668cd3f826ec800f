"""The sessions table's compressed string columns read back every cell as it was."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tito_cli.read.packed import CHUNK_ROWS, PackedStrings


@given(st.lists(st.one_of(st.none(), st.text()), max_size=50), st.booleans())
def test_every_cell_reads_back_in_any_order(values: list[str | None], large: bool) -> None:
    packed = PackedStrings(pa.array(values, pa.large_string() if large else pa.string()))
    assert len(packed) == len(values)
    order = list(range(len(values)))
    random.Random(len(values)).shuffle(order)
    assert [packed[k] for k in order] == [values[k] for k in order]


def test_a_long_column_is_kept_in_compressed_chunks() -> None:
    values = [None if k % 7 == 0 else f'{{"task": "fix-{k}", "features": ["reasoning", "retry"]}}' for k in range(5000)]
    column = pa.array(values)
    packed = PackedStrings(column)
    # Read across the chunk boundaries, backwards and forwards.
    for k in [4999, 0, CHUNK_ROWS - 1, CHUNK_ROWS, 2 * CHUNK_ROWS + 3, 1]:
        assert packed[k] == values[k]
    assert packed.nbytes < column.nbytes / 4
    with pytest.raises(IndexError):
        packed[5000]
