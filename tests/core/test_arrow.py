"""The numpy/Arrow helpers the hot paths lean on (tito_cli/_arrow.py)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tito_cli._arrow import same_values
from tito_cli.algorithm.linearize import common_prefix_length

small_ints = st.lists(st.integers(0, 3), max_size=40)


@given(small_ints, small_ints, st.sampled_from([np.int32, np.int64, np.uint8]))
def test_same_values_agrees_with_numpy(a: list[int], b: list[int], dtype: type) -> None:
    x, y = np.array(a, dtype=dtype), np.array(b, dtype=dtype)
    assert same_values(x, y) == np.array_equal(x, y)


@given(small_ints, st.integers(0, 39), st.integers(-3, 3))
def test_same_values_on_views_into_one_buffer(values: list[int], at: int, change: int) -> None:
    # The reader compares slices of decoded columns: views at an offset into a shared buffer.
    buffer = np.array(values + values, dtype=np.int32)
    n = len(values)
    first, second = buffer[:n], buffer[n:]
    if n:
        second[at % n] += change
    assert same_values(first, second) == (change == 0 or n == 0)


def test_same_values_compares_values_where_bytes_would_mislead() -> None:
    # Mixed dtypes, strided views and floats go through numpy.
    assert same_values(np.array([1, 2], np.int32), np.array([1, 2], np.int64))
    assert same_values(np.arange(10, dtype=np.int32)[::2], np.array([0, 2, 4, 6, 8], np.int32))
    assert same_values(np.array([0.0], np.float32), np.array([-0.0], np.float32))
    assert not same_values(np.array([1, 2], np.int32), np.array([1, 2, 3], np.int32))


@given(small_ints, small_ints)
def test_common_prefix_length_is_where_they_first_differ(a: list[int], b: list[int]) -> None:
    expected = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    assert common_prefix_length(np.array(a, np.int32), np.array(b, np.int32)) == expected
