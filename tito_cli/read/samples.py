"""A samples file read back (``tito export``): its values checked, beyond what its schema says.

The schema says the types; a file written by another tool, or edited, can
still hold values a trainer would take wrong without a word: a null token
(read naively, the token -2147483648), a loss mask of another length than
``response_length``, a NaN logprob, metadata that is not a JSON object
(slime's ``Sample.metadata`` is a dict).  :func:`check_sample_values` names the
first one, with file, row and session (exit 4: nothing is written).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from ..capture.records import loads_json
from ..errors import SchemaError
from ..schema import PROVENANCE_KEY

__all__ = ["check_sample_values"]


def _validity(values: pa.Array) -> np.ndarray:
    """Which entries of ``values`` are not null, as booleans (from its validity bitmap: no pyarrow.compute)."""
    if values.null_count == 0:
        return np.ones(len(values), dtype=bool)
    bits = np.unpackbits(np.frombuffer(values.buffers()[0], dtype=np.uint8), bitorder="little")
    return bits[values.offset : values.offset + len(values)].astype(bool)


def _list_values(table: pa.Table, name: str) -> tuple[np.ndarray, np.ndarray, pa.Array]:
    """A list column's per-row lengths, each value's row, and the values (one array)."""
    column = table.column(name).combine_chunks()
    offsets = np.asarray(column.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    values = column.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
    lengths = np.diff(offsets)
    return lengths, np.repeat(np.arange(len(lengths)), lengths), values


def check_sample_values(table: pa.Table, path: Path, first_row: int) -> np.ndarray:
    """Raise :class:`SchemaError` (exit 4, nothing written) at the first value a trainer would get wrong.

    The schema says the types; this says the values: no null anywhere a
    trainer reads (a null token would be written as -2147483648), token ids
    not negative, ``loss_mask`` of 0s and 1s as long as ``response_length``,
    which is within the tokens, ``rollout_log_probs`` as long and finite,
    a finite reward, and ``metadata`` a strict JSON object.  ``first_row``: the file row of the table's first row.
    Returns each sample's length in tokens.
    """
    ids = table.column("session_id").to_pylist()

    def fail(row: int, message: str) -> None:
        raise SchemaError(message, file=path, row=first_row + row, session_id=ids[row])

    for name in ("tokens", "response_length", "loss_mask", "rollout_log_probs", "reward"):
        valid = _validity(table.column(name).combine_chunks())
        if not valid.all():
            fail(int(np.argmin(valid)), f"{name} is null")
    lists = {name: _list_values(table, name) for name in ("tokens", "loss_mask", "rollout_log_probs")}
    for name, (_, rows, values) in lists.items():
        valid = _validity(values)
        if not valid.all():
            k = int(np.argmin(valid))
            fail(int(rows[k]), f"{name} holds a null (position {k - int(np.searchsorted(rows, rows[k]))})")
    token_lengths, token_rows, tokens = lists["tokens"]
    negative = np.flatnonzero(tokens.to_numpy(zero_copy_only=False) < 0)
    if len(negative):
        fail(int(token_rows[negative[0]]), "tokens holds a negative token id")
    response = np.asarray(table.column("response_length").to_numpy(), dtype=np.int64)
    for name in ("loss_mask", "rollout_log_probs"):
        lengths = lists[name][0]
        bad = np.flatnonzero(lengths != response)
        if len(bad):
            row = int(bad[0])
            fail(row, f"{name} has {int(lengths[row])} values, response_length is {int(response[row])}")
    bad = np.flatnonzero((response < 0) | (response > token_lengths))
    if len(bad):
        row = int(bad[0])
        fail(row, f"response_length {int(response[row])} is outside 0..{int(token_lengths[row])} (the tokens)")
    _, mask_rows, masks = lists["loss_mask"]
    bad = np.flatnonzero((masks.to_numpy(zero_copy_only=False) != 0) & (masks.to_numpy(zero_copy_only=False) != 1))
    if len(bad):
        fail(int(mask_rows[bad[0]]), "loss_mask holds a value other than 0 and 1")
    _, logprob_rows, logprobs = lists["rollout_log_probs"]
    bad = np.flatnonzero(~np.isfinite(logprobs.to_numpy(zero_copy_only=False)))
    if len(bad):
        fail(int(logprob_rows[bad[0]]), "rollout_log_probs holds NaN or infinity")
    rewards = np.asarray(table.column("reward").to_numpy(), dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(rewards))
    if len(bad):
        fail(int(bad[0]), f"reward is {rewards[bad[0]]}, not a finite number")
    for row, text in enumerate(table.column("metadata").to_pylist()):
        problem = _metadata_problem(text)
        if problem is not None:
            fail(row, problem)
    return token_lengths


def _metadata_problem(text: str | None) -> str | None:
    """Why a sample's ``metadata`` is not what a trainer reads (a JSON object; slime's ``Sample.metadata``)."""
    if text is None:
        return "metadata is null"
    try:
        value = loads_json(text, "metadata")
    except ValueError as exc:
        return str(exc)
    if not isinstance(value, dict):
        return "metadata is not a JSON object"
    provenance = value.get(PROVENANCE_KEY)
    if provenance is not None and not isinstance(provenance, dict):
        return f"metadata[{PROVENANCE_KEY!r}] is not a JSON object"
    turns = provenance.get("turns") if provenance is not None else None
    if turns is not None and not (
        isinstance(turns, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in turns)
    ):
        return f"metadata[{PROVENANCE_KEY!r}]['turns'] is not a list of integers"
    return None
