"""The interface of a model-family profile, and the parsed output every parser returns."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = [
    "DRIFT_CHANGES",
    "REASONING_DROPPED",
    "RETOKENIZED",
    "TOOL_ARGS_RERENDERED",
    "WHITESPACE_TRIMMED",
    "FamilyProfile",
    "Markers",
    "ParsedOutput",
    "ToolCall",
]

#: What a replay can change in the tokens a turn held, by name (the drift classes of ``report/drift.py``;
#: the simulator records the same names for the changes it knows it made).
REASONING_DROPPED = "reasoning dropped"
RETOKENIZED = "re-tokenized"
TOOL_ARGS_RERENDERED = "tool-call args re-rendered"
WHITESPACE_TRIMMED = "whitespace trimmed"
DRIFT_CHANGES = (REASONING_DROPPED, RETOKENIZED, TOOL_ARGS_RERENDERED, WHITESPACE_TRIMMED)


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
    #: Tokens only this family's vocabulary holds together (how a tokenizer is recognised whatever its name).
    tokenizer_marks: ClassVar[tuple[str, ...]] = ()
    #: Special tokens a rendered prompt can be cut in front of: each piece tokenizes alone to the ids it has
    #: in the whole text (special tokens split the text before pre-tokenization), so the simulator caches pieces.
    message_starts: ClassVar[tuple[str, ...]] = ()
    #: The chat template to render with (a file tito ships in ``_data/templates``) when the tokenizer
    #: folders one finds for the family carry another or none; ``None``: the tokenizer's own.
    template: ClassVar[str | None] = None
    #: The template writes every tool call back in another form than the model wrote it (so each turn
    #: after a tool call drifts there), as harmony's does.
    rerenders_tool_calls: ClassVar[bool] = False
    #: The template trims each message's content (leading and trailing whitespace of an output is lost).
    trims_content: ClassVar[bool] = False

    @classmethod
    def recognises(cls, tokenizer_name: str | None, tokenizer: Any = None) -> bool:
        """Whether the tokenizer is this family's: by its hub name, else by ``recognises_tokenizer``."""
        if tokenizer is not None and cls.recognises_tokenizer(tokenizer):
            return True
        return tokenizer_name is not None and any(re.match(p, tokenizer_name, re.IGNORECASE) for p in cls.hub_names)

    @classmethod
    def recognises_tokenizer(cls, tokenizer: Any) -> bool:
        """Whether a loaded tokenizer is this family's: its vocabulary holds every one of ``tokenizer_marks``."""
        if not cls.tokenizer_marks:
            return False
        vocab = tokenizer.get_vocab()
        return all(mark in vocab for mark in cls.tokenizer_marks)

    @abstractmethod
    def parse_output(self, text: str) -> ParsedOutput:
        """``text`` (the decoded output, special tokens kept) as reasoning, content and tool calls."""

    # -- how history re-renders: the drift classifier's questions -----------------------------------

    def reasoning_block(self, reasoning: str) -> str:
        """The reasoning ``reasoning`` (as the parser returns it) written as a block, the way the model writes it."""
        assert self.reasoning is not None, f"the {self.name} family writes no reasoning"
        return f"{self.reasoning.open}{reasoning}{self.reasoning.close}"

    def reasoning_spans(self) -> tuple[Markers, ...]:
        """The blocks that hold reasoning in rendered text (held outputs and prompts alike)."""
        return (self.reasoning,) if self.reasoning is not None else ()

    def tool_call_start(self, text: str, at: int) -> int | None:
        """Where the tool-call block that offset ``at`` lies in starts (opened before it, not closed before it)."""
        if self.tool_call is None:
            return None
        opened = text.rfind(self.tool_call.open, 0, at)
        if opened < 0 or text.rfind(self.tool_call.close, 0, at) > opened:
            return None
        return opened

    def read_tool_call(self, text: str, start: int) -> Any:
        """The call written at ``start`` (a :meth:`tool_call_start`), as a comparable value; ``None`` if unreadable."""
        return None

    def drift_change(self, held: str, prompt: str, parted: int) -> str | None:
        """What the replay changed where ``held`` and ``prompt`` part (at offset ``parted``), if it is known.

        ``held`` is the text a turn held (its prompt and output), ``prompt`` the next turn's prompt
        from the same offset on.  One of :data:`DRIFT_CHANGES` but ``re-tokenized`` (told from the ids
        by the caller), or ``None``: something else changed.
        """
        if self._reasoning_dropped(held, prompt, parted):
            return REASONING_DROPPED
        start = self.tool_call_start(held, parted)
        if start is not None:
            call = self.read_tool_call(held, start)
            if call is not None and call == self.read_tool_call(prompt, start):
                return TOOL_ARGS_RERENDERED
        if _whitespace_trimmed(held, prompt, parted):
            return WHITESPACE_TRIMMED
        return None

    def _reasoning_dropped(self, held: str, prompt: str, parted: int) -> bool:
        """The texts part at, or inside, a reasoning block of the held side that the prompt does not repeat."""
        for span in self.reasoning_spans():
            opened = held.rfind(span.open, 0, parted + len(span.open))
            if opened < 0 or held.rfind(span.close, 0, parted) > opened:
                continue
            closed = held.find(span.close, opened + len(span.open))
            if closed < 0:
                continue
            block = held[opened : closed + len(span.close)]
            if prompt[opened : opened + len(block)] != block:
                return True
        return False

    # -- the simulator's side: how the model writes and how a server hands messages to the template ----

    def write_output(
        self,
        reasoning: str | None,
        content: str,
        calls: list[tuple[str, dict[str, Any]]],
        loose: frozenset[int],
        prompt: str,
    ) -> str:
        """The raw text the model emits (the family's own format, with its end marker) after ``prompt``.

        The arguments of the calls numbered in ``loose`` are written without spaces after ``,`` and ``:``.
        """
        raise NotImplementedError(f"the {self.name} profile does not simulate outputs")

    def server_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The messages as the family's inference servers hand them to its chat template."""
        return messages

    def template_kwargs(self, *, thinking: bool) -> dict[str, Any]:
        """Extra variables the template reads (a thinking switch)."""
        return {}

    def template_at(self, template: str, now: Any) -> str:
        """``template`` reading the clock ``now`` instead of the machine's (a simulation is deterministic).

        Templates that write today's date call transformers' ``strftime_now``; its data-only inputs
        cannot replace that function, so a family whose template reads the clock pins it here.
        """
        return template


_WHITESPACE_WINDOW = 64


def _whitespace_trimmed(held: str, prompt: str, parted: int) -> bool:
    """One side has whitespace where the texts part, and they differ only in whitespace for a while after.

    (A trimmed content loses whitespace at both of its ends: the rest is compared without any.)
    """
    a, b = held[parted:], prompt[parted:]
    if not (a[:1].isspace() or b[:1].isspace()):
        return False
    a_rest, b_rest = "".join(a.split()), "".join(b.split())
    n = min(len(a_rest), _WHITESPACE_WINDOW)
    return n > 0 and a_rest[:n] == b_rest[:n]
