"""Options of the native libraries under tito, set before they load (the command line imports this first).

Both libraries read these from the environment once, when they load, so
this module must run before anything imports pyarrow or numpy.  Only the
command line does it: a program that imports tito as a library keeps its
own settings.  A value already in the environment wins.

* ``MIMALLOC_PURGE_DELAY=-1``: pyarrow's allocator (mimalloc) keeps the
  memory it frees.  A rebuild decodes a row group (megabytes of token ids
  and prompt text), keeps it while its sessions are rebuilt, frees it and
  decodes the next.  By default mimalloc hands freed pages back to the
  operating system soon after, so each new row group lands on fresh pages
  that the kernel must fault in and zero: a 100-session rebuild took about
  twice the page faults of merely reading the same files, and 0.1-0.3 s
  more system time (docs/performance.md).  Kept pages are reused by the
  next row group.  Peak memory rises a little, as kept pages are not
  always reused exactly: one worker's peak RSS at 20 / 100 benchmark
  sessions went from 293 / 303 to 290 / 310 MiB (319 MiB at 300).
* ``OPENBLAS_NUM_THREADS=1``: numpy's BLAS starts a thread per core when
  numpy is imported, and each spins for a while before it sleeps: about
  0.12 s of CPU per process, taken from the workers on a busy machine.
  tito never multiplies matrices.
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
