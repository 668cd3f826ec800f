"""Paths: file names derived from session ids (untrusted), shipped tokenizers' names.

Output targets are checked in :mod:`tito_cli._targets`.
"""

from __future__ import annotations

import hashlib
import re

__all__ = [
    "FIXTURE_TOKENIZER",
    "QWEN3_TOKENIZER",
    "SHIPPED_NAMES",
    "safe_filename",
]

#: The simulator's tokenizers, by the names its logs record (folders relative to the repository's root;
#: the package ships a copy of each, see ``tito_cli.tokenizer.SHIPPED``).
FIXTURE_TOKENIZER = "fixtures/tokenizer"
QWEN3_TOKENIZER = "fixtures/tokenizers/qwen3"
#: The short names a user types for the shipped tokenizers (``--tokenizer qwen3``).
SHIPPED_NAMES = {"qwen3": QWEN3_TOKENIZER, "small": FIXTURE_TOKENIZER}

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_filename(session_id: str, suffix: str = "") -> str:
    """A file name for ``session_id`` that cannot leave its folder or collide.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``, a leading dot is
    replaced (no hidden files, no ``..``), and when anything was changed a
    short hash of the real id is appended so two ids never share a name.
    """
    name = _UNSAFE.sub("_", session_id)
    if name.startswith("."):
        name = "_" + name[1:]
    name = name[:150]
    if name != session_id or not name:
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:10]
        name = f"{name}-{digest}"
    return name + suffix
