"""The real tokenizer and chat template, used the way a harness and an inference server use them.

:class:`Chat` renders prompts with ``apply_chat_template`` and tokenizes
them, decodes output ids and parses them into an assistant message (the
server's reasoning and tool-call parsers).  ``transformers`` is imported here
only, when a :class:`Chat` is made, so commands other than ``simulate`` never
pay for it.

Prompts are tokenized incrementally.  The rendered text is cut in front of
every ``<|im_start|>``; because special tokens split the text before
pre-tokenization, the ids of the whole text are exactly the ids of the
pieces, concatenated.  Each piece (one message block) is tokenized once and
cached, so a growing conversation costs only its new blocks.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from ..errors import TokenizerError

__all__ = ["IM_END", "IM_START", "Chat"]

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
_THINK_OPEN, _THINK_CLOSE = "<think>\n", "\n</think>\n\n"
_TOOL_CALL = re.compile(r"<tool_call>\n(.*?)\n</tool_call>", re.DOTALL)

Ids = npt.NDArray[np.int32]
Message = dict[str, Any]


class Chat:
    """One tokenizer with its chat template, plus a cache of tokenized message blocks."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        from transformers import AutoTokenizer  # slow import: only when simulating

        self.path = Path(path)
        local = self.path.is_dir()
        try:
            # Never the folder's own Python (auto_map): only transformers' tokenizer classes.
            self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=local, trust_remote_code=False)
        except Exception as exc:  # transformers raises many types for a bad folder
            raise TokenizerError(f"cannot load tokenizer ({type(exc).__name__}: {exc})", file=self.path) from None
        self._backend = self.tokenizer.backend_tokenizer
        self.im_start = self._backend.token_to_id(IM_START)
        self.im_end = self._backend.token_to_id(IM_END)
        if self.im_start is None or self.im_end is None:
            raise ValueError(f"{path}: the tokenizer has no {IM_START} / {IM_END} tokens")
        self._blocks: dict[str, Ids] = {}
        self._splits = self._merge_parents()

    # -- prompts -------------------------------------------------------------

    def render(self, messages: list[Message], tools: list[dict[Any, Any]] | None) -> str:
        """The prompt text for ``messages``, ending with the assistant generation prompt."""
        import jinja2  # (its exceptions only: templates run in transformers' sandboxed environment)

        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=cast(Any, tools), tokenize=False, add_generation_prompt=True
            )
        except jinja2.TemplateError as exc:
            raise TokenizerError(f"the chat template failed ({exc})", file=self.path) from None
        assert isinstance(text, str)
        return text

    def encode_prompt(self, text: str) -> Ids:
        """Token ids of a rendered prompt, tokenizing only blocks not seen before."""
        pieces = text.split(IM_START)
        ids: list[Ids] = []
        if pieces[0]:
            ids.append(self._block(pieces[0]))
        for piece in pieces[1:]:
            ids.append(self._block(IM_START + piece))
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

    @staticmethod
    def parse(text: str, call_id: Callable[[], str]) -> Message:
        """The assistant message a server would return for the output ``text``.

        Reasoning between think markers becomes ``reasoning_content``; each
        complete ``<tool_call>`` block whose JSON parses becomes a tool call
        (arguments as a JSON string, as OpenAI-style APIs return them); the
        text before the first call is the content.  Anything malformed (a
        truncated block) stays in the content, as servers do.
        """
        if text.endswith(IM_END):
            text = text[: -len(IM_END)]
        reasoning = None
        if text.startswith(_THINK_OPEN):
            body, closed, rest = text[len(_THINK_OPEN) :].partition(_THINK_CLOSE)
            reasoning, text = (body, rest) if closed else (body, "")
        calls: list[Message] = []
        first_call = None
        for match in _TOOL_CALL.finditer(text):
            try:
                call = json.loads(match.group(1))
                name, arguments = call["name"], call["arguments"]
            except (ValueError, KeyError, TypeError):
                calls = []
                break
            if first_call is None:
                first_call = match.start()
            calls.append(
                {
                    "id": call_id(),
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
                }
            )
        content = text
        if calls:
            assert first_call is not None
            content = text[:first_call]
            content = content[:-1] if content.endswith("\n") else content
        message: Message = {"role": "assistant", "content": content}
        if reasoning is not None:
            message["reasoning_content"] = reasoning
        if calls:
            message["tool_calls"] = calls
        return message
