"""The tokenizer and chat template the gateway renders with (called from worker threads, never the loop)."""

from __future__ import annotations

from typing import Any, cast

from ..errors import TokenizerError
from ..tokenizer import load, resolve
from .exchange import ClientError

__all__ = ["ChatTemplate"]


class ChatTemplate:
    """One tokenizer: its chat template renders messages, its fast backend tokenizes and decodes.

    Thread-safe for what the gateway asks: rendering is a Jinja call, and encoding and decoding go
    straight to the Rust tokenizer (the transformers wrapper would toggle truncation state per call).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.folder = resolve(name, label=f"tokenizer {name!r} (--tokenizer)")
        self.tokenizer = load(self.folder)
        if not getattr(self.tokenizer, "chat_template", None):
            raise TokenizerError("the tokenizer has no chat template", file=self.folder)
        self._backend = self.tokenizer.backend_tokenizer

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        """The prompt text, ending with the assistant generation prompt."""
        import jinja2

        try:
            text = self.tokenizer.apply_chat_template(
                messages, tools=cast(Any, tools), tokenize=False, add_generation_prompt=True
            )
        except (jinja2.TemplateError, TypeError, ValueError, KeyError) as exc:
            raise ClientError(f"the chat template cannot render these messages ({exc})") from None
        if not isinstance(text, str):
            raise ClientError("the chat template did not render text")
        return text

    def encode(self, text: str) -> list[int]:
        return list(self._backend.encode(text, add_special_tokens=False).ids)

    def prompt_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        return self.encode(self.render(messages, tools))

    def decode(self, ids: list[int]) -> str:
        return str(self._backend.decode(ids, skip_special_tokens=False))
