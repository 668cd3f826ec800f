"""``slime-v4``: slime's TrajectoryManager as of its "trajectory manager migration v4" change (SPEC §3–§4).

The default policy; the conformance corpus in ``fixtures/conformance`` holds
its reference's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ...turns import MessageKey, Turn, message_key
from ..policy import ForkCause, Policy, RewardMode
from ..tree import Node

__all__ = ["SlimeV4"]


@dataclass(frozen=True)
class SlimeV4(Policy):
    name: ClassVar[str] = "slime-v4"
    summary: ClassVar[str] = "slime's trajectory manager migration v4 (docs/spec.md §3–§4)"
    default_reward_mode: ClassVar[RewardMode] = "split"
    fork_causes: ClassVar[tuple[ForkCause, ...]] = (
        ForkCause.PROMPT_REGION,
        ForkCause.BEFORE_LATEST_RESPONSE,
        ForkCause.DRIFT_TOO_LONG,
    )
    #: The drifted tail is cut and what survives keeps its mask (inspect's legend says so).
    realign_effect: ClassVar[str | None] = None

    @property
    def message_key(self) -> Callable[[Any], MessageKey]:
        # Canonical JSON text (SPEC §3): 1, 1.0 and true differ.
        return message_key

    def assistant_rewrite_candidates(self, mount: Node) -> Sequence[Node]:
        # SPEC §3 step 4: generated assistant leaves with fewer output ids than the threshold.
        return [
            c
            for c in mount.children
            if c.role == "assistant"
            and c.turn is not None
            and not c.children
            and len(c.turn.output_ids) < self.fork_threshold
        ]

    def latest_response_drift(self, drift: int, turn: Turn) -> ForkCause | None:
        # SPEC §4 step 2, its last rule: the length of the drifted tail decides.
        if drift < self.fork_threshold:
            return None
        return ForkCause.DRIFT_TOO_LONG

    def realign_cut(self, last_span_start: int, lcp: int) -> int:
        # SPEC §4 step 5: only the drifted tail goes; the response's tokens before lcp stay trained.
        return lcp
