"""``tito simulate --provenance``: the simulated server reports weight versions and routed experts.

Routing is a function of the prefix alone (:func:`routing_rows`: a polynomial hash of
``tokens[:p + 1]`` spread over ``[layers, topk]`` expert ids), so any row of any rebuilt sample can
be checked against the sample's own tokens.  Weight versions change every ``version_every``
generated tokens of the run, so within sessions and within calls.  Each call is asked for its rows
from the longest prefix the session already holds (what a gateway sends as
``routed_experts_start_len``), as SGLang answers them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._arrow import common_prefix
from ..capture.writer import TurnLogWriter

__all__ = ["LAYERS", "TOPK", "ProvenanceWriter", "routing_rows"]

LAYERS = 4
TOPK = 2
EXPERTS = 64
_BASE = np.uint64(0x100000001B3)
_INVERSE = np.uint64(pow(int(_BASE), -1, 2**64))
_SPREAD = (np.arange(1, LAYERS * TOPK + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)) | np.uint64(1)


def routing_rows(tokens: Sequence[int] | np.ndarray, start: int, stop: int) -> np.ndarray:
    """Rows ``[start, stop)`` of ``tokens``: row ``p`` depends on ``tokens[:p + 1]`` alone, ``[rows, LAYERS, TOPK]``."""
    if stop <= start:
        return np.zeros((0, LAYERS, TOPK), dtype=np.int32)
    ids = np.asarray(tokens, dtype=np.uint64)[:stop] + np.uint64(1)
    with np.errstate(over="ignore"):
        # h_p = sum_i ids_i * B^(p - i) (mod 2^64) = B^p * cumsum(ids_i * B^-i): unsigned arithmetic wraps.
        powers = np.cumprod(np.concatenate([[np.uint64(1)], np.full(len(ids) - 1, _BASE, np.uint64)]))
        inverse = np.cumprod(np.concatenate([[np.uint64(1)], np.full(len(ids) - 1, _INVERSE, np.uint64)]))
        prefix = powers * np.cumsum(ids * inverse)
        mixed = (prefix[start:stop, None] ^ (prefix[start:stop, None] >> np.uint64(31))) * _SPREAD
    rows: np.ndarray = (mixed >> np.uint64(58)).astype(np.int32).reshape(-1, LAYERS, TOPK) % EXPERTS
    return rows


class ProvenanceWriter(TurnLogWriter):
    """The capture writer fed as a gateway would feed it from a server that reports provenance."""

    def __init__(self, *args: Any, version_every: int = 700, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.version_every = version_every
        self._generated = 0
        self._calls: dict[str, list[np.ndarray]] = {}

    def record_turn(self, session_id: str, prompt_ids: Any, output_ids: Any, *args: Any, **kwargs: Any) -> int:
        tokens = np.concatenate([np.asarray(prompt_ids, dtype=np.int64), np.asarray(output_ids, dtype=np.int64)])
        held = self._calls.setdefault(session_id, [])
        # The longest prefix whose rows the session holds (a call's last token has no row).
        start = max((min(common_prefix(call, tokens), len(call) - 1) for call in held), default=0)
        spans: list[dict[str, Any]] = []
        for index in range(len(output_ids)):
            version = f"step-{self._generated // self.version_every}"
            if spans and spans[-1]["version"] == version:
                spans[-1]["end"] = index + 1
            else:
                spans.append({"version": version, "start": index, "end": index + 1})
            self._generated += 1
        seq = super().record_turn(
            session_id,
            prompt_ids,
            output_ids,
            *args,
            **kwargs,
            weight_versions=spans,
            routed_experts=routing_rows(tokens, start, len(tokens) - 1),
            routed_experts_start=start,
            sampling={"temperature": 1.0, "top_p": 1.0},
            call_kind="agent",
        )
        held.append(tokens)
        del held[:-8]
        return seq

    def finish_session(self, session_id: str, *args: Any, **kwargs: Any) -> None:
        self._calls.pop(session_id, None)
        super().finish_session(session_id, *args, **kwargs)
