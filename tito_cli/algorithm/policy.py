"""A named policy: the one carrier of the rebuild algorithm's knobs and choices.

The router (SPEC §3) and the linearizer (SPEC §4) are the same for every
policy; where the references differ they ask the policy instead of
branching::

    message_key(m)                 identity of a chat message (routing looks children up by it)
    rewrite_candidates(node, m)    who may absorb a short assistant rewrite (exactly one absorbs)
    fork_cause(...)                the drift decision: absorb the turn (None) or fork, and why
    realign_cut(start, lcp)        where a realign cuts the latest response
    rewards(reward, n)             the reward of each of a session's n samples
    sample_flags(turns)            per-leaf flags written into each sample's metadata

``rewrite_candidates`` and ``fork_cause`` make the checks every policy shares
(the opening of §3 step 4, the first rules of §4 step 2) and leave the rest
to the policy: ``assistant_rewrite_candidates`` and ``latest_response_drift``.

A policy is a frozen dataclass: one typed, picklable value that travels to
worker processes and to Ray.  Its fields are the knobs (``fork_threshold``,
``reward_mode``, ``max_sample_tokens``); its class is the algorithm, named by
``name``.  Each named policy is one module in :mod:`tito_cli.algorithm.policies`
and one line in :data:`POLICIES` (the plug-in convention, :mod:`tito_cli.plugins`);
:func:`register_policy` adds one from outside the package (see docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from ..plugins import PluginTable

if TYPE_CHECKING:
    from ..turns import Message, MessageKey, Turn
    from .tree import Node

__all__ = [
    "DEFAULT_FORK_THRESHOLD",
    "DEFAULT_POLICY",
    "POLICIES",
    "ForkCause",
    "Policy",
    "RewardMode",
    "Routing",
    "default_policy",
    "policy_class",
    "policy_label",
    "policy_names",
    "register_policy",
]

RewardMode = Literal["split", "full"]

#: How a session's turns become the tree the linearizer packs: ``messages`` routes them
#: (SPEC §3), ``calls`` hangs them one below the other in call order (TRL's reconciler).
Routing = Literal["messages", "calls"]

#: The references' default: drift (or, for slime-0.3, an incoming output) shorter than
#: this many tokens is realigned, longer forks a new sample.
DEFAULT_FORK_THRESHOLD = 1024

#: The policy used when none is named: slime's "trajectory manager migration v4" (SPEC §3–§4).
DEFAULT_POLICY = "slime-v4"


class ForkCause(str, Enum):
    """Why a turn could not continue the segment holding its chain."""

    #: The prompt diverges inside the segment's first prompt.
    PROMPT_REGION = "prompt_region"
    #: The prompt diverges after the first prompt but before the latest response.
    BEFORE_LATEST_RESPONSE = "before_latest_response"
    #: The drift lies in the latest response but is not shorter than the threshold (slime-v4).
    DRIFT_TOO_LONG = "drift_too_long"
    #: The drift lies in the latest response but the incoming output is not shorter than
    #: the threshold (slime-0.3's gate, SPEC §8.3).
    OUTPUT_TOO_LONG = "output_too_long"


@dataclass(frozen=True)
class Policy(ABC):
    """How sessions are routed and linearized; subclasses are the named policies.

    ``fork_threshold`` (tokens) bounds both short-rewrite absorption in the
    router and realignment in the linearizer; ``0`` disables both.
    ``reward_mode`` is ``split`` (each sample gets reward / samples of its
    session) or ``full`` (each gets the whole reward); ``None`` means the
    policy's own default.  ``max_sample_tokens`` cuts every sample to its
    first N tokens (SPEC §8.7, every policy); ``None`` keeps them whole.
    """

    #: The policy's name, as ``--policy`` takes it.
    name: ClassVar[str]
    #: One line for ``--help``: what the policy reproduces.
    summary: ClassVar[str]
    default_reward_mode: ClassVar[RewardMode] = "split"
    #: The fork causes this policy can give, in the order reports list them.
    fork_causes: ClassVar[tuple[ForkCause, ...]]
    #: What a realign does to the latest response, in a few words, when it differs from SPEC §4's
    #: cut of the drifted tail (``inspect`` shows it after each realign).
    realign_effect: ClassVar[str | None] = None
    #: How the session (:mod:`.session`) builds the tree: routed by messages (SPEC §3), or
    #: one chain of the turns in call order (``calls``: no routing, no rewrite absorbed).
    routing: ClassVar[Routing] = "messages"

    fork_threshold: int = DEFAULT_FORK_THRESHOLD
    reward_mode: RewardMode | None = None
    max_sample_tokens: int | None = None
    #: ``rebuild --routed-experts``: each sample carries its routed experts, or is rejected (docs/spec.md §5).
    routed_experts: bool = dataclasses.field(default=False, metadata={"quiet": True})
    #: ``rebuild --exclude-auxiliary``: calls recorded as ``auxiliary`` are dropped before routing.
    exclude_auxiliary: bool = dataclasses.field(default=False, metadata={"quiet": True})

    def __post_init__(self) -> None:
        if self.fork_threshold < 0:
            raise ValueError(f"fork_threshold must be >= 0, got {self.fork_threshold}")
        if self.reward_mode not in (None, "split", "full"):
            raise ValueError(f"reward_mode must be 'split' or 'full', got {self.reward_mode!r}")
        if self.max_sample_tokens is not None and self.max_sample_tokens <= 0:
            raise ValueError(f"max_sample_tokens must be > 0, got {self.max_sample_tokens}")

    # -- naming and describing -------------------------------------------

    @staticmethod
    def named(name: str, **knobs: Any) -> Policy:
        """The policy called ``name`` (``slime-v4``, ``slime-0.3``, ...) with these field values."""
        return policy_class(name)(**knobs)

    @property
    def effective_reward_mode(self) -> RewardMode:
        return self.reward_mode if self.reward_mode is not None else self.default_reward_mode

    def describe(self) -> dict[str, Any]:
        """The name and every field (the reward mode as it applies): for sample metadata, dumps, reports."""
        described: dict[str, Any] = {"name": self.name}
        for f in dataclasses.fields(self):
            if f.metadata.get("quiet") and not getattr(self, f.name):
                continue  # an option that is off is not named (outputs made without it stay as they were)
            described[f.name] = getattr(self, f.name)
        described["reward_mode"] = self.effective_reward_mode
        return described

    def label(self) -> str:
        """One line naming the policy and its knobs: ``slime-v4, fork threshold 1024, reward split``."""
        return policy_label(self.describe())

    # -- routing (SPEC §3) -------------------------------------------------

    @property
    @abstractmethod
    def message_key(self) -> Callable[[Any], MessageKey]:
        """A function of one message giving a hashable key, equal for two messages exactly when
        the policy calls them the same message.

        The same plain function on every call and every instance, so that the
        reader keys prompts with it once and the router can tell they were.
        """

    def rewrite_candidates(self, mount: Node, message: Message) -> Sequence[Node]:
        """The children of ``mount`` competing to absorb ``message``, the first unmatched prompt message.

        Exactly one: it absorbs the rewrite.  None: nothing happens.  Several:
        nothing happens, and the router records an ambiguous rewrite.
        """
        # SPEC §3 step 4 and §8.2 open alike: only a threshold > 0 and an assistant message.
        if self.fork_threshold <= 0 or message.get("role") != "assistant":
            return ()
        return self.assistant_rewrite_candidates(mount)

    @abstractmethod
    def assistant_rewrite_candidates(self, mount: Node) -> Sequence[Node]:
        """:meth:`rewrite_candidates` for an assistant message, the threshold being > 0."""

    # -- linearization (SPEC §4) -------------------------------------------

    def fork_cause(
        self, lcp: int, drift: int, first_prompt_length: int, last_span_start: int | None, turn: Turn
    ) -> ForkCause | None:
        """``None`` when the segment absorbs ``turn``, else why it forks.

        ``lcp``/``drift``: the prompt's common prefix with the held tokens and
        how many held tokens it drops; ``last_span_start``: where the
        segment's latest response starts (``None`` before its first).
        """
        # SPEC §4 step 2 and §8.3 share all but their last rule: a clean continuation is
        # absorbed, a divergence before the latest response forks.
        if drift == 0:
            return None
        if last_span_start is None or lcp < first_prompt_length:
            return ForkCause.PROMPT_REGION
        if lcp < last_span_start:
            return ForkCause.BEFORE_LATEST_RESPONSE
        return self.latest_response_drift(drift, turn)

    @abstractmethod
    def latest_response_drift(self, drift: int, turn: Turn) -> ForkCause | None:
        """:meth:`fork_cause` when the ``drift`` (> 0) lies in the latest response: ``None`` to realign."""

    @abstractmethod
    def realign_cut(self, last_span_start: int, lcp: int) -> int:
        """Where the latest response ends after a realign at ``lcp`` (its loss-1 tokens end there)."""

    def rewards(self, reward: float, samples: int) -> list[float]:
        """Each sample's reward: ``split`` shares the session's reward, ``full`` copies it."""
        if self.effective_reward_mode == "split" and samples:
            return [reward / samples] * samples
        return [reward] * samples

    def sample_flags(self, turns: Sequence[Turn]) -> dict[str, bool] | None:
        """Flags for every sample of a leaf whose chain generated ``turns`` (``None``: no flags)."""
        return None


def policy_label(described: dict[str, Any]) -> str:
    """:meth:`Policy.label` from :meth:`Policy.describe`'s dict (what ``--json`` outputs carry)."""
    words = [str(described["name"])]
    for key, value in described.items():
        if key != "name" and value is not None:
            words.append(f"{key.replace('_', ' ').removesuffix(' mode')} {value}")
    return ", ".join(words)


#: The named policies: ``--policy NAME`` -> the class, imported when first named.  Adding a
#: policy is one module in ``algorithm/policies/`` and one line here (or :func:`register_policy`).
POLICIES: PluginTable[Policy] = PluginTable(
    "policy",
    {
        "slime-v4": "tito_cli.algorithm.policies.slime_v4:SlimeV4",
        "slime-0.3": "tito_cli.algorithm.policies.slime_03:Slime03",
        "trl": "tito_cli.algorithm.policies.trl:TRL",
    },
    base=Policy,
)

#: Add a policy class (its ``name`` is what ``--policy`` takes): tests and third parties.
register_policy = POLICIES.register


def policy_class(name: str) -> type[Policy]:
    """The policy class registered as ``name``; ``ValueError`` listing the names otherwise."""
    return POLICIES.get(name)


def policy_names() -> list[str]:
    """The policies ``--policy`` accepts, the default first."""
    return sorted(POLICIES.names(), key=lambda n: n != DEFAULT_POLICY)


def default_policy() -> Policy:
    return Policy.named(DEFAULT_POLICY)
