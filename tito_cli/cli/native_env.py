"""Options of the native libraries under tito, set before they load (the command line imports this first).

Both libraries read these from the environment once, when they load, so
this module must run before anything imports pyarrow or numpy.  Only the
command line does it: a program that imports tito as a library keeps its
own settings.  A value already in the environment wins.

* ``MIMALLOC_PURGE_DELAY=-1``: pyarrow's allocator (mimalloc) keeps the
  memory it frees, so each newly decoded row group reuses pages instead of
  fresh ones the kernel must fault in and zero.
* ``OPENBLAS_NUM_THREADS=1``: numpy's BLAS threads would spin on the
  workers' cores; tito never multiplies matrices.

The figures behind both: docs/performance.md, "Decisions".
"""

from __future__ import annotations

import os

#: Variable -> value, each read by its library when it loads.
NATIVE_OPTIONS = {
    "MIMALLOC_PURGE_DELAY": "-1",
    "OPENBLAS_NUM_THREADS": "1",
}

for _name, _value in NATIVE_OPTIONS.items():
    os.environ.setdefault(_name, _value)
