"""Tell pyarrow's allocator to keep the memory it frees; imported before anything loads pyarrow.

A rebuild decodes a row group (megabytes of token ids and prompt text),
keeps it while its sessions are rebuilt, frees it and decodes the next.
mimalloc, pyarrow's default allocator, hands freed pages back to the
operating system soon after, so each new row group lands on fresh pages
that the kernel must fault in and zero: a 100-session rebuild took about
three times the page faults of merely reading the same files, and
0.2-0.3 s more system time (docs/performance.md).  Kept pages are reused
by the next row group instead; peak memory is what it was (the pages were
in use at the peak anyway).

mimalloc reads its options once, when pyarrow's library loads, so this
has to run first.  Only the command line does it: a program that imports
tito as a library keeps its own allocator settings.  A value already in
the environment wins.
"""

from __future__ import annotations

import os

#: mimalloc's option: milliseconds before freed memory is returned to the OS; -1 = never.
PURGE_DELAY = "MIMALLOC_PURGE_DELAY"

os.environ.setdefault(PURGE_DELAY, "-1")
