"""Per-call provenance in the turn log (docs/spec.md §2): weight versions, routed experts, sampling, call kind.

The write contract of the optional provenance cells, used by the writer (a
bad value raises ``ValueError`` in the caller) and by the reader
(:mod:`tito_cli.read.validate` rejects a session that breaks it):

* ``weight_versions``: spans ``{version, start, end}`` over the call's output
  token indices, ordered, non-overlapping, within the output (a scalar version
  is one span over every output token);
* ``routed_experts``: int32 rows ``[rows, layers, topk]`` for the call's token
  positions ``[start, len(prompt) + len(output) - 1)``; every call of a
  session has the same ``layers`` and ``topk``;
* ``sampling``: a JSON object; ``call_kind``: ``agent`` or ``auxiliary``.

:class:`ExpertsLedger` keeps the log compact: the writer stores only the rows
of positions that no earlier call of the session stored for the same prefix
(a row is the routing computed for a prefix, so an earlier call whose tokens
agree up to and including that position computed the same row).
"""

from __future__ import annotations

import json
import numbers
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from .._arrow import common_prefix
from ..schema import PROVENANCE_FIELDS
from ..turns import CALL_KINDS, Provenance, RoutedExperts, VersionSpan
from .records import loads_json

__all__ = [
    "PROVENANCE_CELLS",
    "ExpertsLedger",
    "check_experts_shape",
    "check_version_spans",
    "compress_rows",
    "experts_rows",
    "provenance_cells",
    "read_provenance",
    "version_spans",
]

#: The turns-table columns that hold provenance (all nullable; a file without any of them has none).
PROVENANCE_CELLS = tuple(field.name for field in PROVENANCE_FIELDS)

#: Levels of zstd for the expert rows: rows of small integers compress well at any level.
_ZSTD_LEVEL = 3


def version_spans(value: Any, outputs: int) -> tuple[VersionSpan, ...]:
    """``weight_versions`` as given to the writer (a str, or spans as dicts or triples), checked."""
    if isinstance(value, str):
        return (VersionSpan(value, 0, outputs),) if outputs else ()
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"weight_versions must be a str or a list of spans, got {type(value).__name__}")
    spans = []
    for number, item in enumerate(value):
        if isinstance(item, VersionSpan):
            spans.append(item)
            continue
        if isinstance(item, Mapping):
            fields = (item.get("version"), item.get("start"), item.get("end"))
        elif isinstance(item, (list, tuple)) and len(item) == 3:
            fields = tuple(item)
        else:
            raise ValueError(f"weight_versions span {number} is not {{version, start, end}}")
        version, start, end = fields
        if not isinstance(version, str):
            raise ValueError(f"weight_versions span {number} has no string version")
        bounds = []
        for name, bound in (("start", start), ("end", end)):
            if isinstance(bound, bool) or not isinstance(bound, numbers.Integral):
                raise ValueError(f"weight_versions span {number} has no integer {name}")
            bounds.append(int(bound))
        spans.append(VersionSpan(version, bounds[0], bounds[1]))
    result = tuple(spans)
    check_version_spans(result, outputs)
    return result


def check_version_spans(spans: Sequence[VersionSpan], outputs: int) -> None:
    """Spans lie within the ``outputs`` output tokens, each non-empty, in order, none overlapping."""
    previous = 0
    for number, span in enumerate(spans):
        if not 0 <= span.start < span.end <= outputs:
            raise ValueError(
                f"weight_versions span {number} [{span.start}, {span.end}) is not a non-empty range "
                f"within the {outputs} output tokens"
            )
        if span.start < previous:
            raise ValueError(f"weight_versions span {number} starts at {span.start}, before the previous one ends")
        previous = span.end


def experts_rows(value: Any, start: Any, tokens: int) -> tuple[np.ndarray, int]:
    """``routed_experts`` as given to the writer, as int32 ``[rows, layers, topk]``, and its ``start``, checked.

    The rows cover positions ``[start, tokens - 1)``: the last token has no row (it was never an input).
    """
    if isinstance(start, bool) or not isinstance(start, numbers.Integral) or start < 0:
        raise ValueError(f"routed_experts_start must be a non-negative int, got {start!r}")
    array = np.asarray(value)
    if array.ndim != 3:
        raise ValueError(f"routed_experts must be [rows, layers, topk], got {array.ndim} dimensions")
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"routed_experts must hold integers, got {array.dtype}")
    if array.size and (int(array.min()) < 0 or int(array.max()) > 2**31 - 1):
        raise ValueError("routed_experts holds a value outside 0..2**31-1")
    expected = tokens - 1 - int(start)
    if array.shape[0] != expected:
        raise ValueError(
            f"routed_experts has {array.shape[0]} rows; positions [{start}, {tokens - 1}) of the call's "
            f"{tokens} tokens need {max(expected, 0)}"
        )
    if array.shape[1] < 1 or array.shape[2] < 1:
        raise ValueError(f"routed_experts rows must have a layer and a top-k dimension, got {array.shape[1:]}")
    return np.ascontiguousarray(array, dtype="<i4"), int(start)


def check_experts_shape(experts: RoutedExperts, tokens: int, shape: tuple[int, int] | None) -> tuple[int, int]:
    """A stored call's rows end at its last token and have the session's row shape; returns the shape."""
    if experts.start < 0 or experts.rows < 0 or experts.stop != max(tokens - 1, 0):
        raise ValueError(
            f"routed_experts covers positions [{experts.start}, {experts.stop}), which do not end at the "
            f"call's last token but one ({tokens - 1})"
        )
    if experts.layers < 1 or experts.topk < 1:
        raise ValueError(f"routed_experts has rows of {experts.layers} layers x {experts.topk} experts")
    own = (experts.layers, experts.topk)
    if shape is not None and own != shape:
        raise ValueError(
            f"routed_experts rows are {own[0]} x {own[1]}, "
            f"but earlier calls of the session have {shape[0]} x {shape[1]}"
        )
    return own


def compress_rows(rows: np.ndarray) -> bytes:
    """The rows as the log stores them: zstd of their little-endian int32 bytes."""
    raw = np.ascontiguousarray(rows, dtype="<i4").tobytes()
    if not raw:
        return b""
    return bytes(pa.Codec("zstd", compression_level=_ZSTD_LEVEL).compress(raw, asbytes=True))


@dataclass(slots=True)
class _Held:
    tokens: np.ndarray
    start: int
    stop: int


class ExpertsLedger:
    """Which rows each open session already stored, so that a call stores only the rows it adds.

    Per session, the last ``calls`` calls that stored rows (their tokens and the positions stored);
    at most ``sessions`` sessions, the least recently recorded forgotten first (a forgotten session's
    next call stores its rows whole: more bytes, never a wrong row).
    """

    def __init__(self, *, calls: int = 4, sessions: int = 1024, max_bytes: int = 256 << 20) -> None:
        self.calls = calls
        self.sessions = sessions
        self.max_bytes = max_bytes
        self._held: OrderedDict[str, list[_Held]] = OrderedDict()
        self._shapes: dict[str, tuple[int, int]] = {}
        self._bytes = 0

    def check_shape(self, session_id: str, shape: tuple[int, int]) -> None:
        """Every call of a session has rows of one shape (``ValueError`` otherwise)."""
        known = self._shapes.get(session_id)
        if known is not None and known != shape:
            raise ValueError(
                f"routed_experts rows are {shape[0]} x {shape[1]}, but earlier calls of session "
                f"{session_id!r} have {known[0]} x {known[1]}"
            )

    def held_until(self, session_id: str, tokens: np.ndarray, start: int) -> int:
        """The first position from ``start`` on whose row the session does not already hold for ``tokens``."""
        held = self._held.get(session_id, [])
        reach = start
        moved = True
        while moved:
            moved = False
            for call in held:
                # Row p of that call is this call's row p when their tokens agree on [0, p].
                valid = min(call.stop, common_prefix(call.tokens, tokens))
                if call.start <= reach < valid:
                    reach = valid
                    moved = True
        return reach

    def add(self, session_id: str, tokens: np.ndarray, start: int, stop: int) -> None:
        held = self._held.setdefault(session_id, [])
        self._held.move_to_end(session_id)
        if stop > start:
            held.append(_Held(tokens, start, stop))
            self._bytes += tokens.nbytes
            for old in held[: -self.calls]:
                self._bytes -= old.tokens.nbytes
            del held[: -self.calls]
        while len(self._held) > self.sessions or (self._bytes > self.max_bytes and len(self._held) > 1):
            self.forget(next(iter(self._held)))

    def remember_shape(self, session_id: str, shape: tuple[int, int]) -> None:
        self._shapes[session_id] = shape

    def forget(self, session_id: str) -> None:
        for old in self._held.pop(session_id, []):
            self._bytes -= old.tokens.nbytes
        self._shapes.pop(session_id, None)

    def forget_all(self) -> None:
        self._held.clear()
        self._shapes.clear()
        self._bytes = 0


def provenance_cells(
    outputs: int,
    weight_versions: Any,
    sampling: Any,
    call_kind: Any,
) -> dict[str, Any]:
    """The weight-version, sampling and call-kind cells of a turns row, checked (``ValueError`` naming the field)."""
    cells: dict[str, Any] = {}
    if weight_versions is not None:
        spans = version_spans(weight_versions, outputs)
        cells["weight_versions"] = json.dumps([s.to_dict() for s in spans], ensure_ascii=False)
    if sampling is not None:
        if isinstance(sampling, str):
            try:
                value = json.loads(sampling)
            except ValueError:
                raise ValueError("sampling is not valid JSON") from None
            text = sampling
        else:
            value = sampling
            try:
                text = json.dumps(sampling, ensure_ascii=False, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"sampling cannot be stored as JSON ({exc})") from None
        if not isinstance(value, dict):
            raise ValueError("sampling is not a JSON object")
        cells["sampling"] = text
    if call_kind is not None:
        if call_kind not in CALL_KINDS:
            raise ValueError(f"call_kind must be one of {', '.join(CALL_KINDS)}, got {call_kind!r}")
        cells["call_kind"] = call_kind
    return cells


def read_provenance(
    weight_versions: str | None,
    sampling: str | None,
    call_kind: str | None,
    experts: tuple[bytes | None, int | None, int | None, int | None],
    tokens: int,
    outputs: int,
    shape: tuple[int, int] | None,
) -> tuple[Provenance | None, tuple[int, int] | None]:
    """A row's provenance cells (texts decoded) as the reader checks them; ``ValueError`` naming the cell.

    ``tokens``: the call's prompt + output ids; ``shape``: the row shape of the session's earlier calls.
    Returns the provenance (``None`` when every cell is null) and the session's row shape.
    """
    spans = None
    if weight_versions is not None:
        value = loads_json(weight_versions, "weight_versions")
        if not isinstance(value, list):
            raise ValueError("weight_versions is not a JSON array of spans")
        spans = version_spans(value, outputs)
    sampling_value = None
    if sampling is not None:
        sampling_value = loads_json(sampling, "sampling")
        if not isinstance(sampling_value, dict):
            raise ValueError("sampling is not a JSON object")
    if call_kind is not None and call_kind not in CALL_KINDS:
        raise ValueError(f"call_kind is {call_kind!r}, not one of {', '.join(CALL_KINDS)}")
    routed = None
    data, start, layers, topk = experts
    if data is not None:
        if start is None or layers is None or topk is None:
            raise ValueError("routed_experts is set but routed_experts_start, _layers or _topk is null")
        routed = RoutedExperts(start, max(tokens - 1 - start, 0), layers, topk, data)
        shape = check_experts_shape(routed, tokens, shape)
    if spans is None and sampling_value is None and call_kind is None and routed is None:
        return None, shape
    return Provenance(spans, routed, sampling_value, call_kind), shape
