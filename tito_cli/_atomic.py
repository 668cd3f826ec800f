"""Write files so that readers see the old file or the whole new one, never half of one.

A writer killed mid-write (SIGKILL, OOM, node loss) leaves only its hidden
temporary ``.<name>.<12 hex>.tmp`` beside the target, never a partial target.
While it writes, the writer holds an exclusive ``flock`` on that temporary;
the kernel drops the lock when the process dies, however it dies.  So a later
writer of the same target can tell a dead writer's leftover (lock free:
remove it) from a live writer's file (lock held: leave it), see
:func:`remove_stale_temporaries`.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks, no stale-file cleanup
    fcntl = None  # type: ignore[assignment]

__all__ = ["atomic_path", "fsync_directory", "remove_stale_temporaries"]


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _temporary_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")


def _create_locked(tmp: Path) -> int | None:
    """Create ``tmp`` and hold an exclusive lock on it (released when the fd closes or the process dies)."""
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    if fcntl is not None:
        # A filesystem without locks: the file is still written atomically.
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@contextlib.contextmanager
def atomic_path(target: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``target``; on success fsync it and rename it over ``target``.

    The temporary name starts with a dot and does not end in ``.parquet``, so
    a log reader scanning the folder never picks up a file being written.  On
    any exception the temporary file is removed and ``target`` is untouched.
    The caller must write the temporary in place (open, truncate, write), as
    Parquet and ``Path.write_*`` do, so that the lock stays on its inode.
    """
    target = Path(target)
    tmp = _temporary_name(target)
    lock_fd = _create_locked(tmp)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    fsync_directory(target.parent)


def remove_stale_temporaries(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries of ``target`` that killed writers left behind; return them.

    A temporary whose lock another process holds belongs to a live writer and
    is kept.  Only for targets with a single writer at a time (a rebuild's
    output), and only where ``flock`` is real: on a filesystem whose locks are
    node-local, a writer on another node would look dead.
    """
    if fcntl is None:  # pragma: no cover
        return []
    target = Path(target)
    pattern = re.compile(rf"\.{re.escape(target.name)}\.[0-9a-f]{{12}}\.tmp")
    removed = []
    try:
        candidates = sorted(p for p in target.parent.iterdir() if pattern.fullmatch(p.name))
    except OSError:
        return []
    for tmp in candidates:
        try:
            fd = os.open(tmp, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: a live writer
        else:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
            removed.append(tmp)
        finally:
            os.close(fd)
    return removed
