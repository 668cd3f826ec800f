"""The client dialects the gateway answers: one module each behind :class:`~.base.Dialect`."""

from __future__ import annotations

from ...plugins import PluginTable
from .base import Dialect

__all__ = ["DIALECTS", "Dialect", "register_dialect"]

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
