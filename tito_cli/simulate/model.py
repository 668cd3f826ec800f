"""The simulated model: what the agent decided to say, as output token ids with logprobs.

The agent (``agent.py``) decides an :class:`Action`: reasoning, prose and
tool calls.  :meth:`Model.generate` writes it out in the model family's own
format (its profile's ``write_output``), so that a clean output re-renders to
the same ids wherever the family's template allows, then applies what
real generation does to it: a non-canonical tokenization of one piece of
text, a cut at ``max_tokens`` (``length``), an abort, or nothing at all.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from ..algorithm.policy import DEFAULT_FORK_THRESHOLD
from ..families import FamilyProfile, family_named
from .chat import Chat

__all__ = ["LONG_OUTPUT", "Action", "Generation", "Model", "output_text"]

#: Outputs at least this long count as long: a rewrite of one is not absorbed,
#: and drift near its start is too long to realign (with the default threshold).
LONG_OUTPUT = DEFAULT_FORK_THRESHOLD


@dataclass(slots=True)
class Action:
    """One assistant reply, before it is written out."""

    content: str
    #: (tool name, arguments) in the order the model writes them.
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    reasoning: str | None = None


def output_text(
    action: Action, loose: frozenset[int] = frozenset(), family: FamilyProfile | None = None, prompt: str = ""
) -> str:
    """The raw text the model emits for ``action`` after ``prompt`` (the family's format, default Qwen3's).

    The arguments of the calls numbered in ``loose`` are written without
    spaces after ``,`` and ``:``, as models sometimes do; a server parses them
    and the template renders them back with spaces.
    """
    family = family or family_named("qwen3")
    return family.write_output(action.reasoning, action.content, action.calls, loose, prompt)


@dataclass(slots=True)
class Generation:
    ids: npt.NDArray[np.int32]
    logprobs: npt.NDArray[np.float32]
    finish_reason: str
    #: The text the ids decode to.
    text: str
    #: Position of the first non-canonical token pair in ``ids``, if any was emitted.
    noncanonical_at: int | None = None
    #: Tool calls whose arguments were written without spaces.
    loose_calls: int = 0


class Model:
    """Turns actions into output ids, deterministically for a given random generator."""

    def __init__(self, chat: Chat, rng: random.Random) -> None:
        self.chat = chat
        self.rng = rng

    def generate(
        self,
        action: Action,
        *,
        max_tokens: int,
        noncanonical: float = 0.0,
        abort: bool = False,
        empty: bool = False,
        loose_json: float = 0.0,
        prompt: str = "",
    ) -> Generation:
        """Write ``action`` out as ids.

        Each token that BPE made by merging two others is, with chance
        ``noncanonical``, spelled as those two instead: the same text, ids the
        tokenizer would not produce (sampling does this).  ``abort`` keeps a
        random prefix and reports ``abort``; ``empty`` returns no ids at all;
        an output longer than ``max_tokens`` is cut there and reports
        ``length``.  Each call's arguments are written without spaces with
        chance ``loose_json``.  ``prompt`` is the rendered prompt (a family may
        open a block there that the output goes on with).
        """
        if empty:
            return Generation(np.zeros(0, np.int32), np.zeros(0, np.float32), "stop", "")
        loose = frozenset(i for i in range(len(action.calls)) if loose_json > 0 and self.rng.random() < loose_json)
        ids = self.chat.encode(output_text(action, loose, self.chat.family, prompt))
        finish = "tool_calls" if action.calls else "stop"
        unlikely: list[int] = []
        if noncanonical > 0:
            ids, unlikely = self._respell(ids, noncanonical)
        if abort:
            ids = ids[: self.rng.randint(0, max(1, len(ids) // 2))]
            finish = "abort"
        elif len(ids) > max_tokens:
            ids = ids[:max_tokens]
            finish = "length"
        unlikely = [i for i in unlikely if i < len(ids)]
        array = np.asarray(ids, dtype=np.int32)
        first = unlikely[0] if unlikely else None
        logprobs = self._logprobs(len(array), unlikely)
        return Generation(array, logprobs, finish, self.chat.decode(array), first, len(loose))

    def _respell(self, ids: list[int], rate: float) -> tuple[list[int], list[int]]:
        """Split some merged tokens (never the last, the end marker) into their two parts.

        Returns the new ids and the positions of the first token of each pair.
        """
        out: list[int] = []
        at: list[int] = []
        for i, token in enumerate(ids):
            pair = self.chat.split(token) if i < len(ids) - 1 else None
            if pair is not None and self.rng.random() < rate:
                at.append(len(out))
                out += pair
            else:
                out.append(token)
        return out, at

    def _logprobs(self, n: int, unlikely: list[int]) -> npt.NDArray[np.float32]:
        """Plausible per-token logprobs: mostly confident, a few hesitant, non-canonical ones rare."""
        gen = np.random.default_rng(self.rng.getrandbits(64))
        values = -gen.exponential(0.08, n)
        hesitant = gen.random(n) < 0.06
        values[hesitant] = -gen.uniform(0.7, 4.0, int(hesitant.sum()))
        for i in unlikely:
            values[i] = -gen.uniform(4.0, 9.0)
        return values.astype(np.float32)
