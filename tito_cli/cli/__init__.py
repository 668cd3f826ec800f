# ruff: noqa: I001  (commands are imported in the order `tito --help` lists them)
"""tito's command line: a thin layer over the library.

Each command lives in a module of its own and registers itself on ``app``
when imported here; the order below is the order ``tito --help`` lists them.
"""

from __future__ import annotations

import gc

# First: the native libraries read their options when they load (before pyarrow, numpy).
from . import native_env  # noqa: F401

# Importing a command module registers its command (in help order, not sorted).
from . import (  # noqa: F401
    rebuild,
    export,
    import_traces,
    inspect,
    view,
    ls,
    stats,
    dump,
    check,
    compact,
    simulate,
    serve,
)
from .app import app

__all__ = ["app", "main"]


#: Allocations (less deallocations) between collections of the youngest generation.
GC_THRESHOLD = 5000


def main() -> None:
    # A rebuild allocates many small objects (parsed messages, keys, tree nodes) that live
    # for one session, and each session breaks its own cycles (run/local.py _drop).  Collect
    # less often, and never rescan what the imports made (forked workers inherit both).
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD)
    app(prog_name="tito")
