"""``trl``: what TRL's async GRPO trainer trains on (``trl/experimental/async_grpo/async_rollout_worker.py``).

TRL 1.16.0's ``_chain_to_sequences`` reconciles one conversation's calls in
the order they were made, each against the row it is building, never a
routing tree: the session is one chain in call order
(:mod:`..call_order`).  Its CLEAN / REALIGN / FORK decision and its realign
(the drifted tail overwritten by the prompt as context, the response's tokens
before it still trained) are slime-v4's, with ``fork_threshold`` as
``fork_threshold_tokens``; a row with no trained token is dropped; every row
of a conversation carries its whole reward (``full``).  ``tests/algorithm/test_trl_policy.py``
runs TRL's own code on the same turns and compares every row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from ..policy import RewardMode, Routing
from ..tree import Node
from .slime_v4 import SlimeV4

__all__ = ["TRL"]


@dataclass(frozen=True)
class TRL(SlimeV4):
    """slime-v4's decisions (TRL's ``classify_token_drift`` and ``_align_to_prompt`` are the same rules), on
    one chain of the calls in order, every row with the whole reward."""

    name: ClassVar[str] = "trl"
    summary: ClassVar[str] = "TRL 1.16.0's async GRPO reconciler: each session's calls in order (docs/policies.md)"
    default_reward_mode: ClassVar[RewardMode] = "full"
    routing: ClassVar[Routing] = "calls"

    def assistant_rewrite_candidates(self, mount: Node) -> Sequence[Node]:
        # Never asked: a call-order chain is not routed, so no rewrite is absorbed.
        return ()
