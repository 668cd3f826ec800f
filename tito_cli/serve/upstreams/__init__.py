"""The upstreams the gateway calls: one module each behind :class:`~.base.Upstream` (``--upstream-api``)."""

from __future__ import annotations

from ...plugins import PluginTable
from .base import Upstream

__all__ = ["UPSTREAMS", "Upstream", "register_upstream"]

#: ``--upstream-api`` name -> upstream class, imported when first used.
UPSTREAMS: PluginTable[Upstream] = PluginTable(
    "upstream",
    {
        "generate": "tito_cli.serve.upstreams.generate:GenerateUpstream",
        "chat": "tito_cli.serve.upstreams.chat:ChatUpstream",
    },
    base=Upstream,
)

register_upstream = UPSTREAMS.register
