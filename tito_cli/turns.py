"""One generation call, as the engine sees it.

The reader (``readpath``, then ``validate``) turns Parquet rows into :class:`Turn` objects after
validating them; the router and linearizer only ever see valid turns.  Token
ids stay numpy arrays end to end: a long session holds millions of prompt ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Message", "RowRef", "SessionInfo", "Turn", "canonical_json"]

Message = dict[str, Any]
IdArray = npt.NDArray[np.int32]
LogprobArray = npt.NDArray[np.float32]


# SPEC §3 defines identity as equality of json.dumps(m, sort_keys=True,
# ensure_ascii=False).  Escaping non-ASCII characters is a one-to-one mapping of
# strings, so ASCII output gives exactly the same equality, and the C encoder
# writes it about a quarter faster.  One encoder object, built once: json.dumps
# with options builds a new one per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=True)


def canonical_json(value: Any) -> str:
    """Message identity (SPEC §3): key order is irrelevant, list order and ``1`` vs ``1.0`` are not.

    The text is a key to compare, not to show: equal exactly when the SPEC's
    ``json.dumps(value, sort_keys=True, ensure_ascii=False)`` texts are equal.
    """
    return _CANONICAL.encode(value)


@dataclass(frozen=True, slots=True)
class RowRef:
    """Where a record came from, for error messages and reject reports."""

    file: str
    row: int

    def __str__(self) -> str:
        return f"{self.file}, row {self.row}"


@dataclass(eq=False, slots=True)
class Turn:
    """One validated turn-log row."""

    seq: int
    prompt_ids: IdArray
    output_ids: IdArray
    #: ``None`` when no logprobs were recorded (null or empty in the log).
    output_logprobs: LogprobArray | None
    finish_reason: str
    prompt_messages: list[Message]
    response_message: Message | None
    tools: Any = None
    metadata: Any = None
    source: RowRef | None = None
    #: Canonical JSON of each prompt message, filled by whoever parsed the
    #: messages (the reader caches it across turns); computed lazily otherwise.
    message_keys: list[str] | None = field(default=None, repr=False)
    #: Set by the reader when this prompt's message list starts with all of an
    #: earlier turn's prompt messages (the same objects): ``(that turn, how many)``.
    #: The router then starts below where that turn's prompt ended.
    extends: tuple[Turn, int] | None = field(default=None, repr=False)

    def keys(self) -> list[str]:
        if self.message_keys is None:
            self.message_keys = [canonical_json(m) for m in self.prompt_messages]
        return self.message_keys


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A sessions-table row (SPEC §2); defaults stand for a session without one."""

    reward: float = 0.0
    index: int | None = None
    group_index: int | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    source: RowRef | None = None
    #: False when the session had no sessions row (reward 0.0, null index fields).
    finished: bool = True
