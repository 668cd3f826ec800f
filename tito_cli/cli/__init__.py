# ruff: noqa: I001  (commands are imported in the order `tito --help` lists them)
"""tito's command line: a thin layer over the library.

Each command lives in a module of its own and registers itself on ``app``
when imported here; the order below is the order ``tito --help`` lists them.
"""

from __future__ import annotations

# Importing a command module registers its command (in help order, not sorted).
from . import (  # noqa: F401
    rebuild,
    inspect,
    ls,
    stats,
    dump,
    check,
    simulate,
)
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
