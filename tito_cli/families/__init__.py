"""Model families: one profile per family (its markers, how its template re-renders history, its parser).

Everything that depends on a family's text conventions — the drift classifier, the simulator, the
gateway's ``generate`` parser — asks the profile of the log's tokenizer instead of hard-coding one
family's markers.  The profiles are one :class:`~tito_cli.plugins.PluginTable`; adding a family is one
module here and one line in :data:`FAMILIES`.
"""

from __future__ import annotations

from typing import Any

from ..plugins import PluginTable
from .base import (
    DRIFT_CHANGES,
    REASONING_DROPPED,
    RETOKENIZED,
    TOOL_ARGS_RERENDERED,
    WHITESPACE_TRIMMED,
    FamilyProfile,
    Markers,
    ParsedOutput,
    ToolCall,
)

__all__ = [
    "DRIFT_CHANGES",
    "FAMILIES",
    "REASONING_DROPPED",
    "RETOKENIZED",
    "TOOL_ARGS_RERENDERED",
    "WHITESPACE_TRIMMED",
    "FamilyProfile",
    "Markers",
    "ParsedOutput",
    "ToolCall",
    "family_for",
    "family_named",
    "register_family",
    "shipped_template",
]

#: Family name -> profile class, imported when first used.
FAMILIES: PluginTable[FamilyProfile] = PluginTable(
    "model family",
    {
        "qwen3": "tito_cli.families.qwen3:Qwen3",
        "deepseek-v3": "tito_cli.families.deepseek_v3:DeepSeekV3",
        "gpt-oss": "tito_cli.families.gpt_oss:GptOss",
        "llama3": "tito_cli.families.llama3:Llama3",
        # Template-only here: no tokenizer obtainable offline (fixtures/templates).
        "glm45": "tito_cli.families.glm45:Glm45",
        "kimi-k2": "tito_cli.families.kimi_k2:KimiK2",
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
    if tokenizer is not None:
        tokenizer = _VocabularyOnce(tokenizer)
    for name in FAMILIES.names():
        profile = FAMILIES.get(name)
        if profile.recognises(tokenizer_name, tokenizer):
            return profile()
    return None


class _VocabularyOnce:
    """A tokenizer whose ``get_vocab`` is built once for all the profiles that ask (150k-200k entries)."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._vocab: dict[str, int] | None = None

    def get_vocab(self) -> dict[str, int]:
        if self._vocab is None:
            self._vocab = dict(self._tokenizer.get_vocab())
        return self._vocab

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


def shipped_template(profile: FamilyProfile) -> str | None:
    """The text of the chat template tito ships for ``profile`` (``None``: it renders with the tokenizer's own)."""
    if profile.template is None:
        return None
    from importlib import resources  # not at import: every command's start-up would pay for it

    return (resources.files("tito_cli") / "_data" / "templates" / profile.template).read_text(encoding="utf-8")
