"""The client dialects the gateway answers: one module each behind :class:`~.base.Dialect`."""

from __future__ import annotations

from collections.abc import Container, Sequence

from ...plugins import PluginTable
from .base import Dialect

__all__ = ["DEFAULT_DIALECT", "DIALECTS", "Dialect", "dialect_for", "register_dialect"]

#: Dialect name (``metadata.wire`` of its turns) -> dialect class, imported when first used.
DIALECTS: PluginTable[Dialect] = PluginTable(
    "client dialect",
    {
        "anthropic": "tito_cli.serve.dialects.anthropic:AnthropicMessages",
        "responses": "tito_cli.serve.dialects.responses:OpenAIResponses",
        "chat": "tito_cli.serve.dialects.chat:ChatCompletions",
    },
    base=Dialect,
)

register_dialect = DIALECTS.register

#: The dialect of a request that neither its route nor a marker header names (OpenAI's shapes).
DEFAULT_DIALECT = "chat"


def dialect_for(dialects: Sequence[Dialect], path: str, headers: Container[str]) -> Dialect:
    """The dialect a request speaks: the one whose route ``path`` is, else the one whose ``marker`` is among
    ``headers`` (their names, lower case), else the default."""
    for dialect in dialects:
        if dialect.routes(path):
            return dialect
    for dialect in dialects:
        if dialect.marker is not None and dialect.marker in headers:
            return dialect
    return next((d for d in dialects if d.name == DEFAULT_DIALECT), None) or DIALECTS.get(DEFAULT_DIALECT)()
