"""``trl``: what TRL's async GRPO trainer trains on (``trl/experimental/async_grpo/async_rollout_worker.py``).

TRL 1.16.0's ``_chain_to_sequences`` reconciles one conversation's calls in
the order they were made, each against the row it is building, never a
routing tree: the session is one chain in call order
(:mod:`..call_order`).  Its CLEAN / REALIGN / FORK decision and its realign
(the drifted tail overwritten by the prompt as context, the response's tokens
before it still trained) are slime-v4's, with ``fork_threshold`` as
``fork_threshold_tokens``; a row with no trained token is dropped; every row
of a conversation carries its whole reward (``full``).  ``tests/test_trl_policy.py``
runs TRL's own code on the same turns and compares every row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ...turns import MessageKey, Turn, message_key
from ..policy import ForkCause, Policy, RewardMode, Routing
from ..tree import Node

__all__ = ["TRL"]


@dataclass(frozen=True)
class TRL(Policy):
    name: ClassVar[str] = "trl"
    summary: ClassVar[str] = "TRL 1.16.0's async GRPO reconciler: each session's calls in order (docs/policies.md)"
    default_reward_mode: ClassVar[RewardMode] = "full"
    routing: ClassVar[Routing] = "calls"
    fork_causes: ClassVar[tuple[ForkCause, ...]] = (
        ForkCause.PROMPT_REGION,
        ForkCause.BEFORE_LATEST_RESPONSE,
        ForkCause.DRIFT_TOO_LONG,
    )

    @property
    def message_key(self) -> Callable[[Any], MessageKey]:
        # TRL compares token ids only; messages keep the canonical identity for the views.
        return message_key

    def assistant_rewrite_candidates(self, mount: Node) -> Sequence[Node]:
        # Never asked: a call-order chain is not routed, so no rewrite is absorbed.
        return ()

    def latest_response_drift(self, drift: int, turn: Turn) -> ForkCause | None:
        # classify_token_drift: REALIGN when the held tokens drop fewer than the threshold.
        if drift < self.fork_threshold:
            return None
        return ForkCause.DRIFT_TOO_LONG

    def realign_cut(self, last_span_start: int, lcp: int) -> int:
        # _align_to_prompt: the held tokens from the common prefix on are replaced, loss 0.
        return lcp
