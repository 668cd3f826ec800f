"""What an upstream answered, read and checked: JSON as ``json.loads`` reads it, ids a model can produce.

Every upstream's translation reads its answer with :func:`loads_answer` (or a typed fast path of its
own that falls back to it) and checks the ids and logprobs with :func:`check_answer` before anything is
held or recorded.  Checked ids become one compact ``int32`` array (:func:`compact_ids`), which the
turn log's writer takes as it is: no Python list is turned into numpy again per turn.
"""

from __future__ import annotations

import json
import math
from array import array
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...capture.records import fast_json
from ..exchange import UpstreamError

__all__ = ["ID_LIMIT", "check_answer", "compact_ids", "loads_answer"]


def loads_answer(content: bytes) -> Any:
    """An upstream's JSON answer, as ``json.loads`` reads it.

    msgspec reads it where it can (a chat answer carries the whole prompt's ids: ~30k integers at 32k
    tokens, several times faster than ``json``); ``json`` reads whatever msgspec refuses (NaN or Infinity
    logprobs, lone surrogates, numbers beyond float64), so the value is ``json``'s either way. msgspec nests
    a little deeper before its recursion limit; an upstream's answer is a few levels deep.
    """
    try:
        return fast_json()(content)
    except (ValueError, RecursionError):
        return json.loads(content)


#: The largest token id the log can hold (its ids are int32).
ID_LIMIT = 1 << 31


def check_answer(
    prompt: Any, output: Any, logprobs: Any, what: str, vocabulary: int | None = None, *, check_prompt: bool = True
) -> None:
    """The ids and logprobs an upstream returned are ones a model can produce, or UpstreamError naming the first
    that is not.

    Ids are JSON integers (``true`` is not 1, ``3.0`` is not 3) in ``0..vocabulary-1`` (``vocabulary``: the
    tokenizer's length, where the gateway has one; else the log's int32 range); logprobs are finite numbers
    at most 0, one per output id.  The prompt ids may be an ``array('i')`` (canonical history's, which the
    gateway made itself: ``check_prompt=False`` skips their values).
    """
    if not isinstance(prompt, (list, array, np.ndarray)) or not len(prompt):
        raise UpstreamError(f"the upstream returned no prompt ids ({what})")
    if not isinstance(output, list) or not isinstance(logprobs, list):
        raise UpstreamError(f"the upstream's output ids or logprobs are not lists ({what})")
    if len(output) != len(logprobs):
        raise UpstreamError(
            f"the upstream answered {len(output)} output token ids but {len(logprobs)} logprobs ({what})"
        )
    limit = ID_LIMIT if vocabulary is None else min(vocabulary, ID_LIMIT)
    if check_prompt:
        _check_ids(prompt, limit, "prompt", what)
    _check_ids(output, limit, "output", what)
    # The usual answer in C-speed passes (an 8k-token output: ~0.3 ms, not ~3); the loop finds what is wrong.
    if not logprobs or (
        set(map(type, logprobs)) <= _NUMBER_TYPES and all(map(math.isfinite, logprobs)) and max(logprobs) <= 0
    ):
        return
    for position, value in enumerate(logprobs):
        if type(value) is not float and type(value) is not int:  # bool, None, str: not a logprob
            raise UpstreamError(
                f"the upstream answered logprob {_shown(value)} at output position {position}: not a number ({what})"
            )
        if not math.isfinite(value) or value > 0:
            raise UpstreamError(
                f"the upstream answered logprob {value!r} at output position {position}: "
                f"a logprob is a finite number at most 0 ({what})"
            )


_NUMBER_TYPES = frozenset({float, int})


def _check_ids(ids: Sequence[Any] | np.ndarray, limit: int, where: str, what: str) -> None:
    if not len(ids):
        return
    if isinstance(ids, np.ndarray):
        if ids.dtype.kind in "iu" and int(ids.min()) >= 0 and int(ids.max()) < limit:
            return
        ids = ids.tolist()
    if (isinstance(ids, array) or set(map(type, ids)) == {int}) and min(ids) >= 0 and max(ids) < limit:
        return  # the usual answer, in C-speed passes; the loop below finds what is wrong
    for position, value in enumerate(ids):
        if type(value) is not int or not 0 <= value < limit:
            if type(value) is not int:
                why = "not an integer"
            elif value >= limit and limit < ID_LIMIT:
                why = f"beyond the tokenizer's {limit} ids"
            else:
                why = f"outside 0..{limit - 1}"
            raise UpstreamError(
                f"the upstream answered token id {_shown(value)} at {where} position {position}: {why} ({what})"
            )


def _shown(value: Any) -> str:
    """A value as JSON shows it (``true``, ``null``, ``"7"``), at most 40 characters."""
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def compact_ids(ids: Sequence[int] | np.ndarray) -> np.ndarray:
    """Ids :func:`check_answer` passed (ints in ``0..2**31-1``) as one ``int32`` array, in one C pass.

    ``array('i', ...)`` reads a list of Python ints at C speed (about twice ``np.array``'s, which makes
    int64 first) and numpy views its buffer: the writer's range check then runs on the array.
    """
    if isinstance(ids, np.ndarray):
        return ids.astype(np.int32, copy=False)
    held = ids if isinstance(ids, array) and ids.typecode == "i" else array("i", ids)
    return np.frombuffer(held, dtype=np.int32) if len(held) else np.zeros(0, dtype=np.int32)
