"""The options of every command that rebuilds, declared once: ``--policy`` and the policy's knobs, ``--tokenizer``.

rebuild, inspect, ls, stats, dump and check all take them, so that each can
be run the way the samples were (or will be) rebuilt; :func:`policy_from`
turns them into the one :class:`~tito_cli.algorithm.policy.Policy` value.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer
import typer.main

from ..algorithm.policy import DEFAULT_FORK_THRESHOLD, DEFAULT_POLICY, Policy, policy_class, policy_names
from ..plugins import PluginTable

__all__ = [
    "FORK_THRESHOLD",
    "MAX_SAMPLE_TOKENS",
    "POLICY",
    "REWARD_MODE",
    "TOKENIZER",
    "RewardChoice",
    "plugin_choice",
    "policy_args",
    "policy_from",
]


class RewardChoice(Enum):
    split = "split"
    full = "full"


def _enum_choice_class() -> Any:
    """The parameter type typer makes of an Enum (click's Choice, or typer's own from 0.28 on)."""
    probe = typer.Typer()

    @probe.command()
    def _probe(value: RewardChoice = typer.Argument(...)) -> None:  # pragma: no cover - never run
        pass

    return type(typer.main.get_command(probe).params[0].type)


class _TableChoice(_enum_choice_class()):  # type: ignore[misc]
    """The names of a plug-in table as that choice type, read when the command runs."""

    def __init__(self, table: PluginTable[Any]) -> None:
        self._table = table
        super().__init__(table.names())

    @property
    def choices(self) -> tuple[str, ...]:
        return tuple(self._table.names())

    @choices.setter
    def choices(self, value: object) -> None:
        pass  # always the table's


def plugin_choice(table: PluginTable[Any]) -> Any:
    """A parameter type (``click_type=``) taking a name of ``table``, shown as typer shows an Enum's
    choices: a plug-in registered after the command line was built (a third party's, a test's) is
    accepted too."""
    return _TableChoice(table)


def _policies_help() -> str:
    return "; ".join(
        f"'{name}': {policy_class(name).summary}, reward '{policy_class(name).default_reward_mode}' by default"
        for name in policy_names()
    )


# A name, checked when the command runs (policy_from): a policy registered after the command
# line was built (a plug-in, a test's variant) is accepted too.
POLICY = typer.Option(
    DEFAULT_POLICY,
    "--policy",
    "-p",
    help="Which reference's algorithm to reproduce: " + _policies_help() + ".",
)
FORK_THRESHOLD = typer.Option(
    DEFAULT_FORK_THRESHOLD,
    "--fork-threshold",
    min=0,
    help="Tokens: a drift inside the latest response is realigned when it (slime-v4) or the incoming output "
    "(slime-0.3) is shorter than this, else it forks; also bounds short-rewrite absorption. 0 disables both. "
    "Raising it can lower the trained tokens: a realign cuts the drifted part of the held response "
    "(slime-0.3: all of it), which then leaves training.",
)
REWARD_MODE = typer.Option(
    None,
    "--reward-mode",
    show_default="the policy's",
    help="'split': each sample gets reward / samples of its session, so a sample's reward depends on how many "
    "samples its session forked into; 'full': each gets the whole reward.",
)
MAX_SAMPLE_TOKENS = typer.Option(
    None,
    "--max-sample-tokens",
    min=1,
    show_default="no cap",
    help="Cut every sample to its first N tokens (its masks and logprobs too); a sample whose first prompt "
    "alone is longer is left out and reported (docs/spec.md §8.7).",
)


def policy_from(
    policy: str,
    fork_threshold: int = DEFAULT_FORK_THRESHOLD,
    reward_mode: RewardChoice | str | None = None,
    max_sample_tokens: int | None = None,
) -> Policy:
    """The policy the options name, with their values."""
    mode = reward_mode.value if isinstance(reward_mode, Enum) else reward_mode
    try:
        return Policy.named(
            policy, fork_threshold=fork_threshold, reward_mode=mode, max_sample_tokens=max_sample_tokens
        )
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--policy") from None


def policy_args(policy: Policy) -> list[str]:
    """The options again, as command-line words, where they differ from the defaults."""
    words: list[str] = []
    if policy.name != DEFAULT_POLICY:
        words += ["--policy", policy.name]
    if policy.fork_threshold != DEFAULT_FORK_THRESHOLD:
        words += ["--fork-threshold", str(policy.fork_threshold)]
    if policy.reward_mode is not None:
        words += ["--reward-mode", policy.reward_mode]
    if policy.max_sample_tokens is not None:
        words += ["--max-sample-tokens", str(policy.max_sample_tokens)]
    return words


TOKENIZER = typer.Option(
    None,
    "--tokenizer",
    metavar="PATH|NAME=PATH",
    help="Where to find the tokenizer: PATH for the one the log records (or to use when it records none), "
    "NAME=PATH for a log that records NAME (repeatable). Without it the recorded name is looked up as a folder "
    "(from the log folder and above, then the working directory), then among tito's shipped tokenizers, then in "
    "the local Hugging Face cache; always offline.",
)
