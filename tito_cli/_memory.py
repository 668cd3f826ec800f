"""Handing freed memory back to the system: glibc's ``malloc_trim`` and pyarrow's allocator.

Both allocators keep what a program frees for its next allocations.  Right
for steady work; wrong after a one-off peak, whose pages would then stay
resident for the rest of the run: opening a log of many sessions (the index
pass holds every turn's session and ``seq`` at once), or a gateway's burst
of requests.  Off glibc (or where it cannot be loaded) the trim does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable

__all__ = ["release_freed_memory", "trim_freed_memory", "trims_here"]


def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        function = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_size_t]
    function.restype = ctypes.c_int
    return function


_TRIM = _malloc_trim()


def trims_here() -> bool:
    """Whether this system has glibc's ``malloc_trim``."""
    return _TRIM is not None


def trim_freed_memory() -> bool:
    """Return glibc's free pages to the system; False where there is no glibc ``malloc_trim``."""
    if _TRIM is None:
        return False
    _TRIM(0)  # ctypes releases the GIL for the call: other threads run on meanwhile
    return True


def release_freed_memory() -> None:
    """Return the free pages of both glibc and pyarrow's memory pool (mimalloc keeps them: cli/native_env.py)."""
    import pyarrow as pa  # (here: the gateway's idle trim needs only glibc's)

    pa.default_memory_pool().release_unused()
    trim_freed_memory()
