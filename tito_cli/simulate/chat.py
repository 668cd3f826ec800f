"""The real tokenizer and chat template, used the way a harness and an inference server use them.

:class:`Chat` renders prompts with ``apply_chat_template`` and tokenizes
them, decodes output ids and parses them into an assistant message (the
server's reasoning and tool-call parsers).  ``transformers`` is imported here
only, when a :class:`Chat` is made, so commands other than ``simulate`` never
pay for it.

The model family's profile (:mod:`tito_cli.families`) says how its outputs
read and how its server hands messages to the template; a family whose
tokenizer folders carry another template (or none) renders with the one tito
ships for it.

Prompts are tokenized incrementally.  The rendered text is cut in front of
every message-start token of the family (``<|im_start|>`` for ChatML);
because special tokens split the text before pre-tokenization, the ids of the
whole text are exactly the ids of the pieces, concatenated.  Each piece (one
message block) is tokenized once and cached, so a growing conversation costs
only its new blocks.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import TokenizerError
from ..families import FamilyProfile, family_named, shipped_template
from ..families.render import render_prompt
from ..tokenizer import load

__all__ = ["IM_END", "IM_START", "Chat"]

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"

Ids = npt.NDArray[np.int32]
Message = dict[str, Any]


class Chat:
    """One tokenizer with its chat template, plus a cache of tokenized message blocks."""

    def __init__(self, path: str | os.PathLike[str], family: FamilyProfile | None = None) -> None:
        self.path = Path(path)
        self.family = family or family_named("qwen3")
        # transformers is imported here, only when simulating; never the folder's own Python (auto_map).
        self.tokenizer = load(self.path)
        self._backend = self.tokenizer.backend_tokenizer
        self.template = shipped_template(self.family)
        missing = [t for t in (*self.family.message_starts, *self.family.end_of_turn) if self._id(t) is None]
        if missing or not (self.template or self.tokenizer.chat_template):
            raise TokenizerError(
                f"the simulator needs a {self.family.name} chat template with "
                f"{' / '.join((*self.family.message_starts, *self.family.end_of_turn))} tokens",
                file=str(path),
            )
        self._starts = re.compile("(?=" + "|".join(re.escape(t) for t in self.family.message_starts) + ")")
        self._blocks: dict[str, Ids] = {}
        self._splits = self._merge_parents()

    def _id(self, token: str) -> int | None:
        found = self._backend.token_to_id(token)
        return None if found is None else int(found)

    # -- prompts -------------------------------------------------------------

    def render(
        self,
        messages: list[Message],
        tools: list[dict[Any, Any]] | None,
        *,
        thinking: bool = False,
        now: datetime | None = None,
    ) -> str:
        """The prompt text for ``messages``, ending with the assistant generation prompt.

        ``thinking`` and ``now`` (the session's clock) go to templates that read them (the family's
        :meth:`~tito_cli.families.FamilyProfile.template_kwargs`).
        """
        import jinja2  # (its exceptions only: templates run in transformers' sandboxed environment)

        template = self.template
        if template is not None and now is not None:
            template = self.family.template_at(template, now)
        variables = self.family.template_kwargs(thinking=thinking)
        try:
            return render_prompt(self.tokenizer, self.family, messages, tools, template=template, variables=variables)
        except jinja2.TemplateError as exc:
            raise TokenizerError(f"the chat template failed ({exc})", file=self.path) from None

    def encode_prompt(self, text: str) -> Ids:
        """Token ids of a rendered prompt, tokenizing only blocks not seen before."""
        ids = [self._block(piece) for piece in self._starts.split(text) if piece]
        return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int32)

    def _block(self, text: str) -> Ids:
        cached = self._blocks.get(text)
        if cached is None:
            cached = np.asarray(self._backend.encode(text, add_special_tokens=False).ids, dtype=np.int32)
            self._blocks[text] = cached
        return cached

    def forget(self) -> None:
        """Drop cached blocks (between sessions, to bound memory)."""
        self._blocks.clear()

    # -- outputs -------------------------------------------------------------

    def encode(self, text: str) -> list[int]:
        """Canonical ids of ``text`` (special tokens in it become their ids)."""
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Any) -> str:
        return str(self._backend.decode([int(i) for i in ids], skip_special_tokens=False))

    def split(self, token: int) -> tuple[int, int] | None:
        """Two ids that spell the same bytes as ``token`` (the BPE merge that made it), if any."""
        return self._splits.get(token)

    def _merge_parents(self) -> dict[int, tuple[int, int]]:
        model = json.loads(self._backend.to_str())["model"]
        vocab: dict[str, int] = model["vocab"]
        parents: dict[int, tuple[int, int]] = {}
        for merge in model["merges"]:
            left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
            child = vocab.get(left + right)
            if child is not None and child not in parents:
                parents[child] = (vocab[left], vocab[right])
        return parents

    # -- the server's parsers -------------------------------------------------

    def parse(self, text: str, call_id: Callable[[], str]) -> Message:
        """The assistant message a server would return for the output ``text`` (the family's parser).

        Reasoning becomes ``reasoning_content``; each tool call that reads becomes a call (arguments as
        a JSON string, as OpenAI-style APIs return them); anything malformed (a truncated block) stays
        in the content, as servers do.
        """
        return self.family.parse_output(text).message(call_id)
