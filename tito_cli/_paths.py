"""Paths tito knows: the fixture tokenizer's, and file names derived from (untrusted) session ids."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

__all__ = ["FIXTURE_TOKENIZER", "PACKAGED_TOKENIZER", "safe_filename"]

#: The tokenizer shipped in the repository (relative to its root), used by the simulator; the
#: name its logs record.
FIXTURE_TOKENIZER = "fixtures/tokenizer"
#: The same files inside the package, so the simulator (and decoding its logs) works after a
#: non-editable install, from any folder (fixtures/tokenizer/build.py writes both).
PACKAGED_TOKENIZER = Path(__file__).resolve().parent / "simulate" / "tokenizer"

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
