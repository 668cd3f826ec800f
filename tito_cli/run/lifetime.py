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

A sweep must never take a live folder for a dead one, so a live folder's
``.lock`` is never seen free: it is locked under another name and renamed
into place (a sweep in between sees no ``.lock`` and leaves the folder), the
folder is removed before its lock is let go, and where ``flock`` does not
work no ``.lock`` appears at all.  A lock only says something to processes
of the kernel that holds it (a ``$TMPDIR`` shared between machines, or a
filesystem whose locks are node-local, would show another machine's live
lock as free), so the ``.lock`` names its machine and boot, and a sweep
leaves the folders of other machines alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
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


def new_pool(
    workers: int,
    context: BaseContext,
    initializer: Callable[..., object] | None = None,
    initargs: tuple[object, ...] = (),
) -> ProcessPoolExecutor:
    """A process pool whose workers die with this process; ``initializer(*initargs)`` then runs in each.

    Every pool of tito's comes from here (the rebuild's workers, the golden dumps'), so none
    outlives a killed command.
    """
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_start_worker,
        initargs=(os.getpid(), initializer, initargs),
    )


def _start_worker(parent_pid: int, initializer: Callable[..., object] | None, initargs: tuple[object, ...]) -> None:
    _die_with_parent(parent_pid)
    if initializer is not None:
        initializer(*initargs)


def _die_with_parent(rebuild_pid: int) -> None:
    """Worker initializer: end this process when ``rebuild_pid``, the process that made the pool, is gone.

    The pid is taken in the rebuild before any worker starts, never read here:
    a worker whose rebuild died before this runs has already been re-parented,
    and ``os.getppid()`` would name init (or a subreaper), which never dies.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    # The kernel kills us when the parent dies from now on; one that died before prctl is seen here.
    if not _rebuild_alive(rebuild_pid):
        os._exit(1)
    # Where prctl does not exist, and under a fork server (prctl watches the server, not the rebuild).
    thread = threading.Thread(target=_watch_parent, args=(rebuild_pid,), name="tito-watch-parent", daemon=True)
    thread.start()


def _watch_parent(rebuild_pid: int) -> None:
    while _rebuild_alive(rebuild_pid):
        time.sleep(_WATCH_SECONDS)
    os._exit(1)


def _rebuild_alive(rebuild_pid: int) -> bool:
    """Whether ``rebuild_pid`` is still this worker's parent, or its fork server's parent.

    When a process dies its children are re-parented at once (to init or a
    subreaper, which were alive all along and so never carry a dead process's
    pid), even while the dead one is a zombie nobody has waited for.  So a pid
    still found up the parent chain is the live rebuild, never a stranger that
    reused its number.
    """
    parent = os.getppid()
    if parent == rebuild_pid:
        return True
    grandparent = _parent_of(parent)
    if grandparent is not None:
        return grandparent == rebuild_pid
    # No /proc (not Linux): the fork server's parent cannot be read; the pid's existence must do.
    try:
        os.kill(rebuild_pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _parent_of(pid: int) -> int | None:
    """``pid``'s parent from ``/proc`` (``None`` where there is no ``/proc``, 0 for a process gone)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return 0 if Path("/proc/self/stat").exists() else None
    except OSError:
        return None
    # The command name (in parentheses) may hold spaces and parentheses: the fields follow the last ")".
    return int(stat_line.rsplit(")", 1)[1].split()[1])


@contextlib.contextmanager
def handoff_folder() -> Iterator[str]:
    """A fresh handoff folder in ``$TMPDIR``, locked while the rebuild runs, removed on leaving.

    Leftovers of killed rebuilds are swept first (:func:`sweep_handoff_folders`).
    """
    sweep_handoff_folders()
    folder = tempfile.mkdtemp(prefix=HANDOFF_PREFIX)
    try:
        lock_fd = _lock_new_folder(folder)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    try:
        yield folder
    finally:
        # Removed while still locked: a concurrent sweep never finds this folder's lock free.
        shutil.rmtree(folder, ignore_errors=True)
        if lock_fd is not None:
            os.close(lock_fd)


def _lock_new_folder(folder: str) -> int | None:
    """Give the new ``folder`` a ``.lock`` that is held from the moment it appears; return its fd.

    A ``.lock`` created under its own name and locked next would be free for
    an instant, and a sweep in that instant would remove the live folder (its
    workers then fail to create their handoff files).  So the file is created
    and locked under another name, then renamed.  Where ``flock`` fails (no
    locks on this filesystem) the folder gets no ``.lock``, which sweeps leave
    alone, and ``None`` is returned.
    """
    if fcntl is None:  # pragma: no cover
        return None
    claiming = os.path.join(folder, _LOCK_NAME + ".new")
    fd = os.open(claiming, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        os.unlink(claiming)
        return None
    try:
        os.write(fd, _this_kernel().encode())
        os.rename(claiming, os.path.join(folder, _LOCK_NAME))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _this_kernel() -> str:
    """Who a lock taken here means something to: this machine's name and, on Linux, this boot's id."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}\n{boot}\n"


def _held_elsewhere(lock_text: str) -> bool:
    """Whether a ``.lock`` written as ``lock_text`` may be held on another machine, out of our sight.

    The locks of this boot of this kernel are ours to see (containers of one
    host share it); a lock of this machine's earlier boot is certainly free.
    An empty ``.lock`` comes from a tito that wrote no name: it is taken to be
    this machine's, as that tito took it.
    """
    if not lock_text:
        return False
    host, _, boot = lock_text.partition("\n")
    here_host, _, here_boot = _this_kernel().partition("\n")
    if boot.strip() and boot == here_boot:
        return False
    return host != here_host


def sweep_handoff_folders(parent: str | os.PathLike[str] | None = None) -> list[Path]:
    """Remove the handoff folders under ``parent`` (default ``$TMPDIR``) of rebuilds that died; return them.

    Left alone: folders whose ``.lock`` is held (a live rebuild's), folders
    without a ``.lock`` (one being created, one where locks do not work, or
    not tito's own) and folders whose ``.lock`` names another machine.
    """
    if fcntl is None:  # pragma: no cover
        return []
    root = Path(parent if parent is not None else tempfile.gettempdir())
    removed = []
    try:
        candidates = sorted(p for p in root.iterdir() if p.name.startswith(HANDOFF_PREFIX) and not p.is_symlink())
    except OSError:
        return []
    for folder in candidates:
        try:
            # Not blocking, not followed: $TMPDIR is shared, and a FIFO named .lock would hang the open.
            fd = os.open(folder / _LOCK_NAME, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue  # not a lock tito made
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock_text = os.read(fd, 4096).decode(errors="replace")
        except OSError:
            continue  # held: a live rebuild
        else:
            if _held_elsewhere(lock_text):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
        finally:
            os.close(fd)
    return removed
