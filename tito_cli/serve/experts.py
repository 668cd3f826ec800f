"""Provenance at the gateway: routed experts (``--routed-experts``), weight versions, the call's kind.

* The rows' shape is ``--routed-experts-shape L,K``, else ``num_hidden_layers`` x ``num_experts_per_tok``
  of the ``config.json`` beside the tokenizer (a Hugging Face model folder).
* :class:`ExpertsAsk` keeps, per session, which rows the log already holds (the last few recorded calls'
  tokens, :class:`~tito_cli.capture.provenance.ExpertsLedger`): a prompt whose prefix they cover is sent
  with ``routed_experts_start_len`` there.  A call's last generated token never counts as held: its row
  is computed only when a later call prefills it.
* :func:`decode_rows` reads SGLang's ``meta_info.routed_experts`` (base64 of raw int32): rows that do not
  fit ``[len(tokens) - 1 - start, L, K]`` are an impossible answer (502); no rows at all is an answer
  recorded without them.
* :func:`call_kind`: ``auxiliary`` for a call without tools that shares no message prefix with the
  session's main line (docs/serve.md, "What a turn records").
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..capture.provenance import ExpertsLedger
from .exchange import UpstreamError

if TYPE_CHECKING:
    from .config import ServeConfig

__all__ = ["CallKinds", "ExpertsAsk", "decode_rows", "experts_shape", "weight_versions"]


def experts_shape(config: ServeConfig) -> tuple[int, int]:
    """The rows' ``(layers, topk)``: the option's, else the model's ``config.json`` (``ValueError`` saying which)."""
    if config.routed_experts_shape is not None:
        return config.routed_experts_shape
    folders = [name for name in (config.tokenizer_folder, config.tokenizer_name) if name]
    for folder in folders:
        path = Path(folder).expanduser() / "config.json"
        if not path.is_file():
            continue
        try:
            model = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ValueError(f"--routed-experts: {path} cannot be read ({exc})") from None
        model = model.get("text_config", model) if isinstance(model, dict) else {}
        layers, topk = model.get("num_hidden_layers"), model.get("num_experts_per_tok")
        if not (isinstance(layers, int) and isinstance(topk, int) and layers > 0 and topk > 0):
            raise ValueError(
                f"--routed-experts: {path} has no num_hidden_layers and num_experts_per_tok (a mixture of experts "
                "model's); give --routed-experts-shape LAYERS,TOPK"
            )
        return layers, topk
    raise ValueError(
        "--routed-experts needs the rows' shape: a config.json beside the tokenizer (--tokenizer NAME=FOLDER) "
        "or --routed-experts-shape LAYERS,TOPK"
    )


class ExpertsAsk:
    """Which rows each session's log holds, so that a prompt asks only for the rows it adds."""

    def __init__(self, shape: tuple[int, int], *, sessions: int = 4096) -> None:
        self.shape = shape
        self._ledger = ExpertsLedger(calls=4, sessions=sessions, max_bytes=64 << 20)

    def start(self, session_id: str, prompt_ids: Sequence[int]) -> int:
        """``routed_experts_start_len`` for this prompt: the first position whose row the session lacks."""
        tokens = _ids(prompt_ids)
        reach = self._ledger.held_until(session_id, tokens, 0)
        return max(0, min(reach, len(tokens) - 1))  # (the prompt's last row is asked again: never an empty ask)

    def recorded(self, session_id: str, tokens: Sequence[int], start: int) -> None:
        """A recorded call holds rows ``[start, len(tokens) - 1)`` of ``tokens``."""
        ids = _ids(tokens)
        self._ledger.add(session_id, ids, start, max(len(ids) - 1, start))

    def forget(self, session_id: str) -> None:
        self._ledger.forget(session_id)


def _ids(ids: Sequence[int]) -> np.ndarray:
    return np.array(ids, dtype=np.int32)


def decode_rows(value: Any, tokens: int, start: int, shape: tuple[int, int]) -> np.ndarray | None:
    """``meta_info.routed_experts`` as int32 rows ``[tokens - 1 - start, layers, topk]``; None when absent."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise UpstreamError(f"the upstream's meta_info.routed_experts is a {type(value).__name__}, not base64 text")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise UpstreamError("the upstream's meta_info.routed_experts is not base64") from None
    layers, topk = shape
    rows = max(tokens - 1 - start, 0)
    if len(raw) != 4 * rows * layers * topk:
        raise UpstreamError(
            f"the upstream's routed experts hold {len(raw) // 4} int32 values; positions [{start}, {tokens - 1}) "
            f"need {rows} rows of {layers} x {topk} = {rows * layers * topk} (--routed-experts-shape)"
        )
    return np.frombuffer(raw, "<i4").reshape(rows, layers, topk).astype(np.int32)


def weight_versions(source: Any) -> Any:
    """The weight versions an answer reports (``weight_versions`` spans, else the scalar ``weight_version``)."""
    if not isinstance(source, dict):
        return None
    spans = source.get("weight_versions")
    if spans is not None:
        return spans
    version = source.get("weight_version")
    return None if version is None else str(version)


class CallKinds:
    """Each session's main line (the first messages of its agent calls), to tell side calls from it.

    A call that carries tools is ``agent`` and its first message becomes the session's main line; a call
    without tools that asks for at most one new token is a probe (``auxiliary``: no agent step fits in
    one token); any other call without tools is ``agent`` when its first message is the main line's (or
    when the session has no main line yet), else ``auxiliary``.  The recorder's session registry bounds
    how many sessions are kept: it calls :meth:`forget` for each session it forgets.
    """

    def __init__(self) -> None:
        self._main: dict[str, set[str]] = {}

    def decide(self, session_id: str, messages: Sequence[Any], tools: Any, max_tokens: int | None = None) -> str:
        first = _first(messages)
        known = self._main.get(session_id)
        if tools:
            self._remember(session_id, first)
            return "agent"
        if max_tokens is not None and max_tokens <= 1:
            return "auxiliary"  # a probe (Claude Code's quota check), before or after the first agent call
        if known is None:
            self._remember(session_id, first)
            return "agent"
        if first in known:
            return "agent"
        return "auxiliary"

    def _remember(self, session_id: str, first: str) -> None:
        main = self._main.setdefault(session_id, set())
        if len(main) < 8:
            main.add(first)

    def forget(self, session_id: str) -> None:
        self._main.pop(session_id, None)

    def __len__(self) -> int:
        return len(self._main)


def _first(messages: Sequence[Any]) -> str:
    """The first message (its role and content) as text: where a call's prefix starts."""
    if not messages:
        return ""
    return json.dumps(messages[0], sort_keys=True, ensure_ascii=False, default=str)
