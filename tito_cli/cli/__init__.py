"""tito's command line: a thin layer over the library.

Each command lives in a module of its own and registers itself on ``app``.
"""

from __future__ import annotations

from . import (  # noqa: F401  (each module registers its command)
    inspect,
    ls,
    rebuild,
    stats,
)
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
