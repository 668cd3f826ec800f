"""tito's command line: a thin layer over the library.

Each command lives in a module of its own and registers itself on ``app``.
"""

from __future__ import annotations

from . import check, dump  # noqa: F401  (register the golden-dump commands)
from . import rebuild  # noqa: F401  (registers the command)
from . import simulate  # noqa: F401  (registers the command)
from .app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
