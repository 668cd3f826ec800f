"""An upstream's JSON answer is read as ``json.loads`` reads it, msgspec or not (serve/upstreams/base.py)."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.helpers import needs

# tito_cli.serve imports the gateway's web stack: skipped without the serve extra, failed under CI.
needs("starlette", "serve", module_level=True)

from tito_cli.serve.upstreams.base import loads_answer  # noqa: E402

# Texts msgspec refuses or reads at its edges; json's value (or error) must be the answer for each.
EDGES = [
    b'{"logprob": NaN}',
    b'{"logprob": -Infinity}',
    b'{"text": "\\ud800 lone"}',
    b'{"big": 1e400}',
    b'{"id": 123456789012345678901234567890}',
    b'{"a": 1, "a": 2}',
    b'{"x": -0.0, "y": -0}',
    b'\xef\xbb\xbf{"bom": true}',
    b'  [1, 2.5e-7, "\\u0000"]  ',
]


def same(a: Any, b: Any) -> bool:
    """Equal values, NaN equal to NaN, and the same types all the way down (1 is not 1.0)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) and (not isinstance(a, float) or math.copysign(1, a) == math.copysign(1, b))


@pytest.mark.parametrize("text", EDGES)
def test_edge_texts_read_as_json_reads_them(text: bytes) -> None:
    assert same(loads_answer(text), json.loads(text))


@pytest.mark.parametrize("text", [b'{"a": 1', b"", b"{'a': 1}", b'{"a": 1,}', b"\xff"])
def test_what_json_refuses_is_refused(text: bytes) -> None:
    with pytest.raises(ValueError):
        json.loads(text)
    with pytest.raises(ValueError):
        loads_answer(text)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(JSON, st.booleans())
def test_generated_answers_read_as_json_reads_them(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(text)
    except ValueError:
        with pytest.raises(ValueError):
            loads_answer(text)
        return
    assert same(loads_answer(text), expected)
