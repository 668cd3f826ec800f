"""Token ids as text a person can read: decoded, whitespace made visible.

The tokenizer is loaded offline only (``HF_HUB_OFFLINE``), from a path given
by the user or recorded in the log (``tito.tokenizer``).  Without one, tokens
are shown as their ids.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from .._paths import FIXTURE_TOKENIZER, PACKAGED_TOKENIZER
from ..errors import TokenizerError

__all__ = ["TokenText", "resolve_tokenizer", "visible"]

_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥"})


def visible(text: str) -> str:
    """Make spaces, newlines and tabs visible: ``␣``, ``↵``, ``⇥``."""
    return text.translate(_VISIBLE)


def resolve_tokenizer(spec: str | None, search_from: Iterable[Path] = ()) -> Path | None:
    """Find a tokenizer folder for ``spec``.

    ``spec`` is used as given when it names a folder; a relative path recorded
    in a log (such as ``fixtures/tokenizer``) is also looked up from each
    folder in ``search_from`` and its parents, so logs moved together with
    their tokenizer still decode.  Returns ``None`` when nothing is found.
    """
    if not spec:
        return None
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if path.is_absolute():
        return None
    for start in search_from:
        start = start.resolve()
        for folder in (start, *start.parents):
            candidate = folder / path
            if candidate.is_dir():
                return candidate
    if spec == FIXTURE_TOKENIZER:  # logs of `tito simulate`, read away from a checkout
        return PACKAGED_TOKENIZER
    return None


def load_tokenizer(path: Path) -> Any:
    """Load a tokenizer folder with transformers, never touching the network, never running its code."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    try:
        from transformers import AutoTokenizer  # slow import: only when decoding is asked for

        # A tokenizer folder travels with untrusted logs: its auto_map Python never runs
        # (transformers would otherwise ask on stdin, and run it on "y").
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as exc:  # transformers raises many types for a bad folder
        if "custom code" in str(exc):
            raise TokenizerError(
                "the tokenizer folder needs its own Python code (auto_map), and tito never runs code from a "
                "tokenizer folder",
                file=path,
                tip="point the log at a tokenizer that transformers' built-in classes load (tokenizer.json)",
            ) from None
        raise TokenizerError(f"cannot load tokenizer ({type(exc).__name__}: {exc})", file=path) from None


class TokenText:
    """Decodes ids one token at a time (cached), or shows ids when there is no tokenizer."""

    def __init__(self, tokenizer: Any = None, name: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self._cache: dict[int, str] = {}

    @classmethod
    def load(cls, spec: str | None, search_from: Iterable[Path] = ()) -> TokenText:
        """A decoder for ``spec`` (see :func:`resolve_tokenizer`); ids only if it is not found."""
        path = resolve_tokenizer(spec, search_from)
        if path is None:
            return cls(None, None)
        return cls(load_tokenizer(path), spec)

    @property
    def decodes(self) -> bool:
        return self.tokenizer is not None

    def raw(self, token_id: int) -> str:
        """One token as text (no whitespace substitution); its id without a tokenizer."""
        token_id = int(token_id)
        text = self._cache.get(token_id)
        if text is None:
            if self.tokenizer is None:
                text = str(token_id)
            else:
                text = self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
            self._cache[token_id] = text
        return text

    def piece(self, token_id: int) -> str:
        """One token, whitespace made visible."""
        return visible(self.raw(token_id))

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self.piece(i) for i in ids]

    def text(self, ids: Sequence[int]) -> str:
        """A run of tokens decoded together (multi-byte characters intact), whitespace visible."""
        if self.tokenizer is None:
            return " ".join(str(int(i)) for i in ids)
        decoded = self.tokenizer.decode(
            [int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
        return visible(decoded)
