"""``slime-0.3``: what slime's main branch (release v0.3.1) trains on (SPEC §8).

It differs from ``slime-v4`` in five places: messages are equal by value
(§8.1), a rewrite is absorbed only by the sole assistant child (§8.2), the
realign gate looks at the incoming output's length (§8.3), a realign masks
the whole latest response (§8.4), and the reward is copied in full (§8.5).
Every sample carries three flags (§8.6).  The conformance corpus in
``fixtures/conformance-slime03`` holds its reference's outputs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ...turns import MessageKey, Turn
from ..policy import ForkCause, Policy, RewardMode
from ..tree import Node

__all__ = ["Slime03", "value_key"]

# Tags of the containers in a value key (see value_key).
_OBJECT, _ARRAY = 0, 1
#: The key of every NaN: the reference's parser returns one shared NaN, equal to itself.
_NAN = (2,)


def value_key(value: Any) -> MessageKey:
    """A key equal to another exactly when the two parsed JSON values are equal as Python compares them.

    Python's own equality and hashing already treat numbers by exact value
    (``1 == 1.0 == True``, ``0 == -0.0 == False``, ``2**53 + 1 != 2.0**53``)
    and agree for equal numbers, so numbers, booleans and null are their own
    key; only NaN, unequal to itself, gets one shared key.  A string is
    itself, an array the tuple of its items' keys, and an object the frozen
    set of its (key, value key) pairs: equal when the key sets and the values
    are, whatever the order, with no sorting and no text encoding.
    """
    kind = type(value)
    if kind is str:
        text: str = value
        return text
    if kind is dict:
        return (_OBJECT, frozenset([(k, v if type(v) is str else value_key(v)) for k, v in value.items()]))
    if kind is list or kind is tuple:
        return (_ARRAY, *[v if type(v) is str else value_key(v) for v in value])
    if kind is float and value != value:
        return _NAN
    key: MessageKey = value
    return key


@dataclass(frozen=True)
class Slime03(Policy):
    name: ClassVar[str] = "slime-0.3"
    summary: ClassVar[str] = "slime main, release v0.3.1 (docs/spec.md §8)"
    default_reward_mode: ClassVar[RewardMode] = "full"
    fork_causes: ClassVar[tuple[ForkCause, ...]] = (
        ForkCause.PROMPT_REGION,
        ForkCause.BEFORE_LATEST_RESPONSE,
        ForkCause.OUTPUT_TOO_LONG,
    )
    realign_effect: ClassVar[str | None] = "whole response masked"

    @property
    def message_key(self) -> Callable[[Any], MessageKey]:
        # Equal by value (§8.1): 1, 1.0 and true are one message.
        return value_key

    def assistant_rewrite_candidates(self, mount: Node) -> Sequence[Node]:
        # §8.2: every assistant child counts, generated or not; only a sole, short, childless
        # generated one absorbs.
        assistants = [c for c in mount.children if c.role == "assistant"]
        if len(assistants) != 1:
            return assistants
        only = assistants[0]
        if only.turn is None or only.children or len(only.turn.output_ids) >= self.fork_threshold:
            return ()
        return assistants

    def latest_response_drift(self, drift: int, turn: Turn) -> ForkCause | None:
        # §8.3: the gate is the incoming output's length, not the drifted tail's.
        if len(turn.output_ids) < self.fork_threshold:
            return None
        return ForkCause.OUTPUT_TOO_LONG

    def realign_cut(self, last_span_start: int, lcp: int) -> int:
        # §8.4: everything from the latest response's start is replaced by the prompt, loss 0.
        return last_span_start

    def sample_flags(self, turns: Sequence[Turn]) -> dict[str, bool] | None:
        # §8.6, over the generated turns of one leaf's chain.
        return {
            "truncated": bool(turns) and turns[-1].finish_reason == "length",
            "use_tool": any(
                isinstance(t.response_message, dict) and bool(t.response_message.get("tool_calls")) for t in turns
            ),
            "ill_formed": any(t.ill_formed for t in turns),
        }
