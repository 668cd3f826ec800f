"""What outlives a rebuild that is killed: nothing.

A rebuild with workers can be ended by SIGKILL or SIGTERM (the OOM killer,
``kill``, a batch scheduler's time limit) before any cleanup code runs.

* **Workers die with their parent.**  Each worker asks the kernel for
  SIGKILL when its parent dies (Linux ``PR_SET_PDEATHSIG``), and also
  watches its parent id from a thread (any POSIX system; and a fork
  server's workers, whose parent is the server: it exits when the rebuild
  that started it does).
* **Handoff folders are swept.**  The folder workers hand sample rows
  through (``$TMPDIR/tito-handoff-*``) holds a ``.lock`` file that the
  rebuild keeps ``flock``-ed while it runs; the kernel drops the lock when
  the process dies, however it dies.  Every rebuild that starts workers
  first removes the handoff folders whose lock is free (a killed run's),
  and leaves those a live rebuild holds.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.context import BaseContext
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks, no sweeping
    fcntl = None  # type: ignore[assignment]

__all__ = ["HANDOFF_PREFIX", "handoff_folder", "new_pool", "sweep_handoff_folders"]

HANDOFF_PREFIX = "tito-handoff-"
_LOCK_NAME = ".lock"
_PR_SET_PDEATHSIG = 1
#: How often a worker looks whether its parent is still there (when the kernel does not tell it).
_WATCH_SECONDS = 0.5


def new_pool(workers: int, context: BaseContext) -> ProcessPoolExecutor:
    """A process pool whose workers die with this process."""
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=context, initializer=_die_with_parent, initargs=(os.getpid(),)
    )


def _die_with_parent(rebuild_pid: int) -> None:
    """Worker initializer: end this process when the one that started it is gone."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The parent may have died before prctl took effect; and where prctl does not exist, this is all.
    thread = threading.Thread(target=_watch_parent, args=(parent,), name="tito-watch-parent", daemon=True)
    thread.start()


def _watch_parent(parent: int) -> None:
    # When a parent dies its children are re-parented at once (to init or a subreaper), even
    # while the dead parent is a zombie nobody has waited for: a changed ppid is the signal.
    while os.getppid() == parent:
        time.sleep(_WATCH_SECONDS)
    os._exit(1)


@contextlib.contextmanager
def handoff_folder() -> Iterator[str]:
    """A fresh handoff folder in ``$TMPDIR``, locked while the rebuild runs, removed on leaving.

    Leftovers of killed rebuilds are swept first (:func:`sweep_handoff_folders`).
    """
    sweep_handoff_folders()
    folder = tempfile.mkdtemp(prefix=HANDOFF_PREFIX)
    lock_fd = os.open(os.path.join(folder, _LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if fcntl is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        yield folder
    finally:
        os.close(lock_fd)
        shutil.rmtree(folder, ignore_errors=True)


def sweep_handoff_folders(parent: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the handoff folders under ``parent`` (default ``$TMPDIR``) of rebuilds that died; return them.

    A folder without a lock file is one being created (the lock comes right
    after the folder), or not tito's own: it is left alone.
    """
    if fcntl is None:  # pragma: no cover
        return []
    root = Path(parent if parent is not None else tempfile.gettempdir())
    removed = []
    try:
        candidates = sorted(p for p in root.iterdir() if p.name.startswith(HANDOFF_PREFIX))
    except OSError:
        return []
    for folder in candidates:
        try:
            fd = os.open(folder / _LOCK_NAME, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: a live rebuild
        else:
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed
