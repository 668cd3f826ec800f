"""A conversation rendered as its family's inference servers render it: the one prompt renderer.

The capture gateway (``serve/template.py``) and the simulator (``simulate/chat.py``) both render
prompts here, so that a recorded prompt and a simulated one are the same text for the same messages:
the messages as the family's servers hand them to the template (:meth:`FamilyProfile.server_messages`),
the template's variables, and the chat template — the one given (tito's shipped copy for the family),
else the tokenizer's own — ending with the assistant generation prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from .base import FamilyProfile

__all__ = ["render_prompt"]


def render_prompt(
    tokenizer: Any,
    family: FamilyProfile | None,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    *,
    template: str | None = None,
    variables: Mapping[str, Any] = {},
) -> str:
    """The prompt text of ``messages`` (``tools``: the function tools the template lists).

    ``template``: the chat template's text (None: the tokenizer's own); ``variables``: what the template
    reads besides (``enable_thinking``, a ``--chat-template-kwargs`` object).  The template's own errors
    (``jinja2.TemplateError``, a ``TypeError`` or ``ValueError`` it raises) reach the caller, which says
    whose input failed; a template that renders no text is a ``TypeError``.
    """
    if family is not None:
        messages = family.server_messages(messages)
    extra = dict(variables)
    if template is not None:
        extra["chat_template"] = template
    text = tokenizer.apply_chat_template(
        messages, tools=cast(Any, tools), tokenize=False, add_generation_prompt=True, **extra
    )
    if not isinstance(text, str):
        raise TypeError("the chat template did not render text")
    return text
