"""The filter language of ``tito ls --where``, over rows of named fields (:mod:`.facts`'s session rows)::

      forks > 0 and samples == 0
      rejected or not (realigns < 3)
      session ~ fix          (~ : contains)

    A bare field is true when it is non-null and non-zero.  Comparisons with a
    null field are false.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["FilterError", "Predicate", "compile_filter"]


class FilterError(ValueError):
    """A filter expression or sort key that cannot be used; the message says why."""


_TOKEN = re.compile(r"\s*(?:(\(|\))|(==|!=|<=|>=|=|<|>|~)|\"([^\"]*)\"|'([^']*)'|([^\s()=!<>~\"']+))")
_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": lambda a, b: a == b,
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "~": lambda a, b: str(b) in str(a),
}
Predicate = Callable[[dict[str, Any]], bool]


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        m = _TOKEN.match(text, position)
        if m is None:
            raise FilterError(f"cannot read the filter at {text[position:]!r}")
        paren, op, dq, sq, word = m.groups()
        if paren:
            tokens.append(("paren", paren))
        elif op:
            tokens.append(("op", op))
        elif dq is not None or sq is not None:
            tokens.append(("string", dq if dq is not None else sq or ""))
        else:
            tokens.append(("word", word))
        position = m.end()
    return tokens


def _value(kind: str, text: str) -> Any:
    if kind == "string":
        return text
    if text in ("null", "none", "None"):
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


class _Parser:
    def __init__(self, text: str, fields: Collection[str]) -> None:
        self.fields = fields
        self.tokens = _tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> tuple[str, str]:
        token = self.peek()
        if token is None:
            raise FilterError("the filter ends too early")
        self.i += 1
        return token

    def parse(self) -> Predicate:
        predicate = self.or_expr()
        if self.peek() is not None:
            raise FilterError(f"unexpected {self.peek()[1]!r} in the filter")  # type: ignore[index]
        return predicate

    def or_expr(self) -> Predicate:
        parts = [self.and_expr()]
        while self.peek() == ("word", "or"):
            self.i += 1
            parts.append(self.and_expr())
        return parts[0] if len(parts) == 1 else (lambda row: any(p(row) for p in parts))

    def and_expr(self) -> Predicate:
        parts = [self.not_expr()]
        while self.peek() == ("word", "and"):
            self.i += 1
            parts.append(self.not_expr())
        return parts[0] if len(parts) == 1 else (lambda row: all(p(row) for p in parts))

    def not_expr(self) -> Predicate:
        if self.peek() == ("word", "not"):
            self.i += 1
            inner = self.not_expr()
            return lambda row: not inner(row)
        return self.atom()

    def atom(self) -> Predicate:
        kind, text = self.take()
        if (kind, text) == ("paren", "("):
            inner = self.or_expr()
            if self.peek() != ("paren", ")"):
                raise FilterError("missing ')' in the filter")
            self.i += 1
            return inner
        if kind != "word" or text not in self.fields:
            raise FilterError(f"unknown field {text!r}; fields: {', '.join(self.fields)}")
        name = text
        if self.peek() is None or self.peek()[0] != "op":  # type: ignore[index]
            return lambda row: bool(row[name])
        op = _OPS[self.take()[1]]
        value_kind, value_text = self.take()
        if value_kind not in ("word", "string"):
            raise FilterError(f"expected a value after the comparison on {name!r}")
        value = _value(value_kind, value_text)

        def compare(row: dict[str, Any]) -> bool:
            actual = row[name]
            if actual is None or value is None:
                # null only equals null; it is neither smaller nor larger than anything.
                if op in (_OPS["=="], _OPS["="]):
                    return actual is None and value is None
                return op is _OPS["!="] and (actual is None) != (value is None)
            try:
                return op(actual, value)
            except TypeError:
                raise FilterError(f"cannot compare {name} ({actual!r}) with {value!r}") from None

        return compare


def compile_filter(expression: str, fields: Collection[str]) -> Predicate:
    """A predicate over rows with ``fields`` (``tito ls``: ``report.facts.FIELDS``) from ``expression``."""
    if not expression.strip():
        return lambda row: True
    return _Parser(expression, fields).parse()
