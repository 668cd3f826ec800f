"""The reader's JSON fast path (msgspec) against ``json`` alone, on generated texts.

``loads_json`` must give the value ``strict_loads`` (``json``, the way every
JSON cell was read before msgspec) gives, or the same error with the same
message, on every text: valid JSON, and the texts where the two parsers
differ (integers beyond 64 bits, lone surrogates, ``NaN`` and ``Infinity``,
numbers beyond float64, duplicate keys, nesting near the recursion limit,
whitespace JSON does not skip, trailing commas, control characters).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_cli.capture import records
from tito_cli.capture.records import loads_json, strict_loads


def json_alone(text: str, what: str) -> Any:
    """``strict_loads`` one call down, as ``loads_json`` calls it: json's recursion limit depends on the stack."""
    return strict_loads(text, what)


def outcome(parse: Any, text: str) -> tuple[str, str]:
    """What a parser makes of ``text``: its value's repr (types, key order, -0.0 told apart) or its error."""
    try:
        return "value", repr(parse(text, "cell"))
    except ValueError as exc:
        return type(exc).__name__, str(exc)


# Literals where msgspec and json may part: each must come out as json reads it.
ODD_SCALARS = [
    "NaN", "-NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "-0", "-0.0", "0e0",
    "01", "-01", "1.", ".5", "+1", "1e", "1e+", "0x10", "1_000",
    str(2**63 - 1), str(2**63), str(2**64 - 1), str(2**64), str(-(2**63) - 1), str(10**40), str(-(10**40)),
    "1" * 4300, "1" * 4301, "1" * 400 + ".5", "1" * 400 + "e10", "0." + "1" * 500,
    "2.2250738585072011e-308", "4.9e-324", "5e-325", "1.7976931348623157e308", "1.7976931348623159e308",
    '"\\ud800"', '"\\udc00"', '"a\\ud800b"', '"\\ud800\\udc00"', '"\\udc00\\ud800"', '"\\ud83d\\ude00"',
    '"\\u00e9"', '"\\u0000"', '"\\x41"', '"\\u12"', '"\\uZZZZ"', '"\\/"', '"\x01"', '"\x1f"', '"\x7f"',
    '"\ud800"', '"é"', '"\t"', "'a'", "nul", "True", "None", "",
]
WHITESPACE = ["", " ", "\t", "\n", "\r", "\x0c", "\x0b", "\xa0", "\ufeff", "\u2028"]

scalar_texts = st.one_of(
    st.sampled_from(ODD_SCALARS),
    st.integers().map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(json.dumps),
    st.text().map(json.dumps),
    st.text().map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.sampled_from(["null", "true", "false"]),
)
space = st.sampled_from(WHITESPACE)
# Few keys, so that objects repeat them (json keeps the first key's place and the last value).
keys = st.one_of(
    st.sampled_from(['"a"', '"b"', '"\\u0061"', '"\\ud800"', '"é"', "1", "a"]), st.text(max_size=3).map(json.dumps)
)
separators = st.sampled_from([",", ", ", " ,", ",\n", ",,"])


@st.composite
def arrays(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    items = draw(st.lists(inner, max_size=4))
    trailing = draw(st.sampled_from(["", "", "", ","]))
    return "[" + draw(space) + draw(separators).join(items) + trailing + "]"


@st.composite
def objects(draw: st.DrawFn, inner: st.SearchStrategy[str]) -> str:
    pairs = draw(st.lists(st.tuples(keys, inner), max_size=4))
    colon = draw(st.sampled_from([":", ": ", " :", "="]))
    return "{" + draw(separators).join(k + colon + v for k, v in pairs) + "}"


json_texts = st.recursive(scalar_texts, lambda inner: st.one_of(arrays(inner), objects(inner)), max_leaves=12)
texts = st.tuples(space, json_texts, space).map("".join)


@pytest.mark.slow
@settings(max_examples=1000)
@given(texts)
def test_fast_path_reads_every_text_as_json_does(text: str) -> None:
    assert outcome(loads_json, text) == outcome(json_alone, text)


@settings(max_examples=300)
@given(st.integers(0, 1200), st.sampled_from(["[", '{"a":', '[{"k":']), st.sampled_from(["1", ""]))
def test_deep_nesting_is_rejected_or_read_as_json_does(depth: int, opener: str, leaf: str) -> None:
    closer = {"[": "]", '{"a":': "}", '[{"k":': "}]"}[opener]
    text = opener * depth + (leaf or ("1" if opener != "[" else "")) + closer * depth
    assert outcome(loads_json, text) == outcome(json_alone, text)


@pytest.mark.parametrize("text", [
    *ODD_SCALARS,
    '{"a": 1, "b": 2, "a": 3}', '{"a": {"x": 1}, "a": [2]}', '[1, 2,]', '{"a": 1,}', "[NaN]", '{"a": Infinity}',
    '[1e400, -1e400]', "[" * 2000 + "]" * 2000,
 "[" * 300 + "]" * 300, "[" * 200 + "]" * 200,
    '{"\\ud800": 1}', "[1] [2]", "\ufeff[]", "[]\x0c",
])
def test_the_odd_cases(text: str) -> None:
    assert outcome(loads_json, text) == outcome(json_alone, text)


def test_deep_nesting_still_an_error_at_a_low_recursion_limit() -> None:
    """Under a lower recursion limit json reaches it sooner; the fast path must not read past it.

    (msgspec reads a few levels deeper than json: 995 against 993 here, at the default limit.)
    """
    text = "[" * 240 + "]" * 240
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(250)
    try:
        fast, slow = outcome(loads_json, text), outcome(json_alone, text)
    finally:
        sys.setrecursionlimit(limit)
    assert fast == slow
    assert slow == ("ValueError", "cell is nested too deeply to parse")


def test_plain_json_takes_the_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """A text msgspec reads never reaches json (else the fast path saves nothing)."""

    class Refuses(json.JSONDecoder):
        def decode(self, s: str, *args: Any, **kwargs: Any) -> Any:
            raise AssertionError("json was asked")

    monkeypatch.setattr(records, "_STRICT_JSON", Refuses())
    assert loads_json('[{"role": "user", "content": "hi \\u00e9"}, 1, 2.5, null]', "cell") == [
        {"role": "user", "content": "hi é"}, 1, 2.5, None,
    ]
    with pytest.raises(AssertionError, match="json was asked"):
        loads_json("[NaN]", "cell")


NESTINGS = {"array": ("[", "", "]"), "object": ('{"a":', "1", "}"), "both": ('[{"a":', "1", "}]")}


def _nested(kind: str, depth: int) -> str:
    opener, leaf, closer = NESTINGS[kind]
    return opener * depth + leaf + closer * depth


def _deepest_json_reads(kind: str) -> int:
    """The deepest nesting ``json`` reads one call down from here."""
    low, high = 1, 5000
    while low < high:
        mid = (low + high + 1) // 2
        try:
            json_alone(_nested(kind, mid), "cell")
            low = mid
        except ValueError:
            high = mid - 1
    return low


@pytest.mark.parametrize("kind", sorted(NESTINGS))
def test_nesting_at_jsons_limit(kind: str) -> None:
    """msgspec reads a few levels deeper than json (995 against 993 at the default limit): not here."""
    deepest = _deepest_json_reads(kind)
    for depth in range(deepest - 3, deepest + 8):
        text = _nested(kind, depth)
        assert outcome(loads_json, text) == outcome(json_alone, text), depth
