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

from .errors import write_error

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no locks, no stale-file cleanup
    fcntl = None  # type: ignore[assignment]

__all__ = ["StagedFile", "atomic_path", "fsync_directory", "publish", "remove_stale_temporaries", "remove_unlocked"]


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
    try:
        lock_fd = _create_locked(tmp)
    except OSError as exc:
        raise write_error(exc, target) from None
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        if isinstance(exc, OSError):
            # The temporary's writes (a full disk, EFBIG) and its rename: the output's, exit 5.
            raise write_error(exc, target) from None
        raise
    finally:
        if lock_fd is not None:
            os.close(lock_fd)
    fsync_directory(target.parent)


class StagedFile:
    """A file written under a locked temporary name beside its ``target``, published by :func:`publish`.

    :func:`atomic_path` publishes one file at the end of a ``with`` block;
    files that must appear together (a samples file and its rejects report)
    are staged first, each written completely, and then published in one
    step, so that a failure while writing any of them leaves every target as
    it was.
    """

    def __init__(self, target: str | os.PathLike[str]) -> None:
        self.target = Path(target)
        self.path = _temporary_name(self.target)
        try:
            self._lock_fd = _create_locked(self.path)
        except OSError as exc:
            raise write_error(exc, self.target) from None

    def discard(self) -> None:
        """Remove the temporary (the target is untouched); safe to call twice."""
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        self._release()

    def _release(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None


def publish(staged: list[StagedFile]) -> None:
    """Move every staged file over its target: all of them, or (on an error) none.

    Each temporary is made durable before the first rename.  The targets
    that exist are hard-linked aside first, so that when a later rename
    fails the earlier ones are rolled back to the previous files.  Only a
    process killed between two renames (microseconds) can leave a mix.
    """
    try:
        _publish(staged)
    except OSError as exc:
        failed = [file.target for file in staged if str(file.path) in (exc.filename, exc.filename2)]
        raise write_error(exc, failed[0] if failed else staged[0].target if staged else None) from None


def _publish(staged: list[StagedFile]) -> None:
    try:
        for file in staged:
            fd = os.open(file.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        # Named like a temporary, unlocked: a killed publisher's leftovers are swept as stale.
        backups: list[Path | None] = []
        for file in staged:
            backup: Path | None = _temporary_name(file.target)
            try:
                os.link(file.target, backup)  # type: ignore[arg-type]
            except OSError:  # no previous file (or no hard links here: then no roll-back either)
                backup = None
            backups.append(backup)
        done: list[int] = []
        try:
            for i, file in enumerate(staged):
                os.replace(file.path, file.target)
                done.append(i)
        except BaseException:
            for i in reversed(done):
                previous = backups[i]
                with contextlib.suppress(OSError):
                    if previous is not None:
                        os.replace(previous, staged[i].target)
                    else:
                        staged[i].target.unlink()
            raise
        finally:
            for backup in backups:
                if backup is not None:
                    with contextlib.suppress(FileNotFoundError):
                        backup.unlink()
    finally:
        for file in staged:
            file.discard()
    for folder in sorted({file.target.parent for file in staged}):
        fsync_directory(folder)


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
    try:
        candidates = sorted(p for p in target.parent.iterdir() if pattern.fullmatch(p.name))
    except OSError:
        return []
    return remove_unlocked(candidates)


def remove_unlocked(paths: list[Path]) -> list[Path]:
    """Remove each of ``paths`` whose ``flock`` no live process holds (a killed writer's); return them.

    Where ``flock`` is not real nothing is removed: a live writer could not be told from a dead one.
    """
    if fcntl is None:  # pragma: no cover
        return []
    removed = []
    for path in paths:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: a live writer
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            removed.append(path)
        finally:
            os.close(fd)
    return removed
