"""Model families: one profile per family (its markers, how its template re-renders history, its parser).

Everything that depends on a family's text conventions — the drift classifier, the simulator, the
gateway's ``generate`` parser — asks the profile of the log's tokenizer instead of hard-coding one
family's markers.  The profiles are one :class:`~tito_cli.plugins.PluginTable`; adding a family is one
module here and one line in :data:`FAMILIES`.
"""

from __future__ import annotations

from typing import Any

from ..plugins import PluginTable
from .base import FamilyProfile, ParsedOutput, ToolCall

__all__ = ["FAMILIES", "FamilyProfile", "ParsedOutput", "ToolCall", "family_for", "family_named", "register_family"]

#: Family name -> profile class, imported when first used.
FAMILIES: PluginTable[FamilyProfile] = PluginTable(
    "model family",
    {
        "qwen3": "tito_cli.families.qwen3:Qwen3",
    },
    base=FamilyProfile,
)

register_family = FAMILIES.register


def family_named(name: str) -> FamilyProfile:
    """The profile registered as ``name`` (``ValueError`` listing the families otherwise)."""
    return FAMILIES.get(name)()


def family_for(tokenizer_name: str | None, tokenizer: Any = None) -> FamilyProfile | None:
    """The profile of a tokenizer, recognised from the tokenizer itself or its hub name; ``None`` if none does.

    ``tokenizer`` (a transformers tokenizer, when loaded) is asked first: a log that names its
    tokenizer by a path or a local alias must still get its family.
    """
    for name in FAMILIES.names():
        profile = FAMILIES.get(name)
        if profile.recognises(tokenizer_name, tokenizer):
            return profile()
    return None
