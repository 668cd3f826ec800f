"""Message identity: ``message_key`` must agree with the SPEC's canonical JSON on every pair.

The router compares ``message_key`` values instead of canonical JSON texts
(SPEC §3) because they are much cheaper to build; these tests hold it to
"equal keys exactly when equal texts", on the values JSON produces and on the
odd ones a library caller can build (non-string keys, tuples, -0.0, NaN).
"""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tito_cli.turns import canonical_json, message_key

# Small alphabets and few values make equal and near-equal messages common.
scalars = st.one_of(
    st.text(alphabet='ab"\\é\n', max_size=3),
    st.integers(-2, 2),
    st.sampled_from([0.0, -0.0, 1.0, 2.5, math.nan, math.inf, True, False, None]),
)
json_keys = st.text(alphabet="ab1", max_size=2)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(json_keys, inner, max_size=3),
        # Keys json.dumps converts to text: 1 -> "1", 2 before 10, True -> "true", None -> "null".
        st.dictionaries(st.sampled_from([1, 2, 10]), inner, max_size=3),
        st.dictionaries(st.just(True), inner, max_size=1),  # (True and None do not sort together)
        st.dictionaries(st.just(None), inner, max_size=1),
    ),
    max_leaves=8,
)


def spec_text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


@given(values, values)
def test_equal_keys_exactly_when_equal_canonical_json(a: Any, b: Any) -> None:
    same_text = spec_text(a) == spec_text(b)
    assert (message_key(a) == message_key(b)) == same_text
    assert (canonical_json(a) == canonical_json(b)) == same_text
    if same_text:
        assert hash(message_key(a)) == hash(message_key(b))


def reversed_keys(value: Any) -> Any:
    """The same value with every object's keys inserted in reverse order."""
    if isinstance(value, dict):
        return {k: reversed_keys(value[k]) for k in reversed(list(value))}
    if isinstance(value, (list, tuple)):
        return type(value)(reversed_keys(v) for v in value)
    return value


@given(values)
def test_key_order_never_matters(value: Any) -> None:
    assert message_key(reversed_keys(value)) == message_key(value)


def test_the_cases_that_break_naive_keys() -> None:
    pairs_equal = [
        ({"a": "x", "b": "y"}, {"b": "y", "a": "x"}),  # key order is irrelevant
        ({1: "x"}, {"1": "x"}),  # json.dumps writes the key 1 as "1"
        ({"a": math.nan}, {"a": math.nan}),  # NaN != NaN, but "NaN" == "NaN"
        ({"a": ("x",)}, {"a": ["x"]}),  # a tuple is a JSON array
    ]
    pairs_different = [
        ({"a": 1}, {"a": 1.0}),  # 1 == 1.0 in Python, not in JSON
        ({"a": 1}, {"a": True}),
        ({"a": 0.0}, {"a": -0.0}),
        ({"a": "1"}, {"a": 1}),
        ({2: "x", 10: "y"}, {"2": "x", "10": "y"}),  # sorted as numbers, then as text
        ({"a": ["x"]}, {"a": {"x": "x"}}),
    ]
    for a, b in pairs_equal:
        assert spec_text(a) == spec_text(b) and message_key(a) == message_key(b)
    for a, b in pairs_different:
        assert spec_text(a) != spec_text(b) and message_key(a) != message_key(b)
