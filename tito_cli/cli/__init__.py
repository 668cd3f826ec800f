"""tito's command line: a thin layer over the library.

Each command lives in a module of its own and registers itself on ``app``
when imported.  ``tito COMMAND`` imports that command's module alone (and
what it imports), not every command's: start-up is part of every command's
time, and a command that never reads Parquet never loads pyarrow.  ``app``
(``from tito_cli.cli import app``) and ``tito --help`` import them all, in
the order ``tito --help`` lists them.
"""

from __future__ import annotations

import gc
import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

# First: the native libraries read their options when they load (before pyarrow, numpy).
from . import native_env  # noqa: F401

if TYPE_CHECKING:
    import typer

    from .app import app as app  # at run time: the property of _Package below

__all__ = ["app", "main"]

#: The command modules, in the order ``tito --help`` lists their commands.
COMMAND_MODULES = (
    "rebuild", "export", "import_traces", "inspect", "view", "ls", "stats", "dump", "check", "compact", "simulate",
    "serve", "demo_upstream",
)
#: Each command's name on the command line and the module that registers it.
COMMANDS = {
    **{name: name for name in COMMAND_MODULES if name not in ("import_traces", "demo_upstream")},
    "demo-upstream": "demo_upstream",
    "import": "import_traces",
    "export-exchanges": "import_traces",
}


def _app(*commands: str) -> typer.Typer:
    """The app with ``commands``' modules imported (every command's when none is named)."""
    for module in sorted({COMMANDS[c] for c in commands}, key=COMMAND_MODULES.index) or COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{module}")
    from .app import app

    return app


class _Package(types.ModuleType):
    """This package, whose ``app`` is the app with every command (not the ``app`` submodule it is defined in).

    Importing a submodule sets the package's attribute of its name, so ``tito_cli.cli.app`` would
    be the module ``cli/app.py`` once anything had imported it; a property keeps it the app.
    """

    @property
    def app(self) -> typer.Typer:
        return _app()

    @app.setter
    def app(self, submodule: Any) -> None:
        pass  # the import system, naming the submodule: the module stays reachable through sys.modules


sys.modules[__name__].__class__ = _Package


def _command(args: list[str]) -> str | None:
    """The command ``args`` name, when it is one of tito's (the global options are flags: ``-v``, ``--version``)."""
    word = next((a for a in args if not a.startswith("-")), None)
    return word if word in COMMANDS else None


#: Allocations (less deallocations) between collections of the youngest generation.
GC_THRESHOLD = 5000


def main() -> None:
    # A rebuild allocates many small objects (parsed messages, keys, tree nodes) that live
    # for one session, and each session breaks its own cycles (run/local.py _drop).  Collect
    # less often, and never rescan what the imports made (forked workers inherit both).
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    command = _command(sys.argv[1:])
    app = _app() if command is None else _app(command)
    app(prog_name="tito")
