"""Options of the native libraries under tito, set before they load (the command line imports this first).

Both libraries read these from the environment once, when they load, so
this module must run before anything imports pyarrow or numpy.  Only the
command line does it: a program that imports tito as a library keeps its
own settings.  A value already in the environment wins.

* ``MIMALLOC_PURGE_DELAY`` (:data:`NEVER_MS`): pyarrow's allocator (mimalloc)
  keeps the memory it frees instead of handing it back 10 ms later, so each
  newly decoded row group reuses pages instead of fresh ones the kernel must
  fault in and zero.  A delay no run reaches rather than ``-1`` (never):
  under ``-1`` mimalloc also ignores an explicit request to purge, and the
  samples writer makes one after each row group it writes
  (``export/parquet.py``).
* ``OPENBLAS_NUM_THREADS=1``: numpy's BLAS threads would spin on the
  workers' cores; tito never multiplies matrices.

The figures behind both: docs/notes/performance.md, "Decisions".
"""

from __future__ import annotations

import os

#: A purge delay (milliseconds) that no run reaches: a day.
NEVER_MS = 24 * 3600 * 1000

#: Variable -> value, each read by its library when it loads.
NATIVE_OPTIONS = {
    "MIMALLOC_PURGE_DELAY": str(NEVER_MS),
    "OPENBLAS_NUM_THREADS": "1",
}

for _name, _value in NATIVE_OPTIONS.items():
    os.environ.setdefault(_name, _value)
