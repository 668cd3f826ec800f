"""The knobs of the rebuild algorithm (SPEC §3–§4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_FORK_THRESHOLD", "Policy", "RewardMode"]

RewardMode = Literal["split", "full"]

#: The reference's default: drift shorter than this many tokens inside the
#: latest response is realigned, longer drift forks a new sample.
DEFAULT_FORK_THRESHOLD = 1024


@dataclass(frozen=True, slots=True)
class Policy:
    """How sessions are routed and linearized.

    ``fork_threshold`` (tokens) bounds both short-rewrite absorption in the
    router and drift realignment in the linearizer; ``0`` disables both.
    ``reward_mode`` is ``split`` (each sample gets reward / samples of its
    session) or ``full`` (each sample gets the whole reward).
    """

    fork_threshold: int = DEFAULT_FORK_THRESHOLD
    reward_mode: RewardMode = "split"

    def __post_init__(self) -> None:
        if self.fork_threshold < 0:
            raise ValueError(f"fork_threshold must be >= 0, got {self.fork_threshold}")
        if self.reward_mode not in ("split", "full"):
            raise ValueError(f"reward_mode must be 'split' or 'full', got {self.reward_mode!r}")
