"""The interface of a model-family profile, and the parsed output every parser returns."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["FamilyProfile", "ParsedOutput", "ToolCall"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model wrote: the function's name and its arguments as parsed JSON."""

    name: str
    arguments: Any


@dataclass(frozen=True)
class ParsedOutput:
    """A raw output split the way an inference server's reasoning and tool-call parsers split it.

    ``ill_formed``: part of the output looked like a tool call or reasoning block but could not be read
    (a truncated block, JSON that does not parse); it then stays in ``content``, as servers leave it.
    """

    content: str
    reasoning: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    ill_formed: bool = False

    def message(self, call_id: Callable[[], str]) -> dict[str, Any]:
        """The OpenAI-style assistant message (arguments as a JSON string, ids from ``call_id``)."""
        import json

        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call_id(),
                    "type": "function",
                    "function": {"name": call.name, "arguments": json.dumps(call.arguments, ensure_ascii=False)},
                }
                for call in self.tool_calls
            ]
        return message


@dataclass(frozen=True)
class Markers:
    """A pair of texts that open and close a block (reasoning, a tool call)."""

    open: str
    close: str


class FamilyProfile(ABC):
    """What tito knows of one model family's text conventions.

    Class attributes describe the family; ``recognises`` tells whether a tokenizer belongs to it;
    ``parse_output`` is the family's output parser (the gateway's ``generate`` upstream uses it).
    """

    #: The family's name (``--family``, the table's key).
    name: ClassVar[str]
    #: One line for help texts and docs/families.md.
    summary: ClassVar[str]
    #: Hub ids of the family's tokenizers, as regular expressions matched at the start of the name.
    hub_names: ClassVar[tuple[str, ...]] = ()
    #: Where the model writes its reasoning, if it does.
    reasoning: ClassVar[Markers | None] = None
    #: Where the model writes a tool call, if it does.
    tool_call: ClassVar[Markers | None] = None
    #: Texts that end a generation (removed from the parsed content).
    end_of_turn: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def recognises(cls, tokenizer_name: str | None, tokenizer: Any = None) -> bool:
        """Whether the tokenizer is this family's: by its hub name, else by ``recognises_tokenizer``."""
        if tokenizer is not None and cls.recognises_tokenizer(tokenizer):
            return True
        return tokenizer_name is not None and any(re.match(p, tokenizer_name, re.IGNORECASE) for p in cls.hub_names)

    @classmethod
    def recognises_tokenizer(cls, tokenizer: Any) -> bool:
        """Whether a loaded tokenizer (its vocabulary, its chat template) is this family's."""
        return False

    @abstractmethod
    def parse_output(self, text: str) -> ParsedOutput:
        """``text`` (the decoded output, special tokens kept) as reasoning, content and tool calls."""
