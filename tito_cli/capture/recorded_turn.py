"""RecordedTurn: one generation call as a value, checked against the write contract before it is buffered."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .provenance import experts_rows, provenance_cells
from .records import JsonLike, PromptMessages, TurnRow, turn_row

__all__ = ["RecordedTurn"]


@dataclass
class RecordedTurn:
    """One generation call as :meth:`TurnLogWriter.record` takes it (the arguments of ``record_turn``)."""

    session_id: str
    prompt_ids: Sequence[int] | np.ndarray
    output_ids: Sequence[int] | np.ndarray
    logprobs: Sequence[float] | np.ndarray | None
    finish_reason: str
    messages: JsonLike | PromptMessages
    response: JsonLike
    tools: JsonLike = None
    metadata: JsonLike = None
    ill_formed: bool = False
    #: Provenance (``record_turn``'s arguments of the same names; all optional).
    weight_versions: str | Sequence[Any] | None = None
    routed_experts: np.ndarray | Sequence[Any] | None = None
    routed_experts_start: int = 0
    sampling: JsonLike = None
    call_kind: str | None = None

    def check(self) -> TurnRow:
        """The row it records, checked against the write contract (``ValueError`` naming the field).

        The provenance cells are in the row; the routed-experts rows are :meth:`experts`'."""
        checked = turn_row(
            self.session_id,
            self.prompt_ids,
            self.output_ids,
            self.logprobs,
            self.finish_reason,
            self.messages,
            self.response,
            self.tools,
            self.metadata,
            ill_formed=self.ill_formed,
        )
        outputs = int(checked.row["output_ids"].size)
        checked.row.update(provenance_cells(outputs, self.weight_versions, self.sampling, self.call_kind))
        return checked

    def experts(self) -> tuple[np.ndarray, int] | None:
        """The routed-experts rows and their start, checked against the call's length (``ValueError``)."""
        if self.routed_experts is None:
            return None
        tokens = len(self.prompt_ids) + len(self.output_ids)
        return experts_rows(self.routed_experts, self.routed_experts_start, tokens)
