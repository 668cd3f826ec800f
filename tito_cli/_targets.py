"""Output targets: the one check every command that writes makes, write errors as exit 5, folders swapped.

Every command that writes (``rebuild``, ``export``, ``export-exchanges``,
``view``, ``import``, ``compact``, ``simulate``) checks each of its targets
with :func:`check_target` before it reads anything:

* a target is absent, or (with ``overwrite``) a regular file, or a folder
  for the commands that write a folder; never a FIFO, device or socket
  (renaming over ``/dev/null`` as root would replace the device; writing
  into a FIFO would block);
* a target is never a symbolic link: outputs are replaced by renaming, which
  would replace the link itself, not the file it names;
* a target is never an input of the command: a file it reads (told apart by
  device and inode, whatever the spelling), a folder it reads or one that
  holds an input, and no ``*.parquet`` output and no folder is written inside
  a folder the command reads (every later command on that folder would read
  it as part of the log).  A pattern target (``rollout_{rollout_id}.pt``) is
  checked for every existing name it expands to.

Files are then written under temporary names and renamed into place
(:mod:`tito_cli._atomic`); folders are written into a fresh hidden folder
beside the target and swapped in by :func:`publish_folder`, which replaces the
old log's files only and keeps everything else in the folder.  A failure
anywhere leaves the previous output as it was.  :func:`writing` turns the
operating system's refusals (a full disk, ``EFBIG``, no permission) into
:class:`~tito_cli.errors.OutputError`, exit 5.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from ._atomic import fsync_directory
from .errors import OutputError, write_error

__all__ = ["check_target", "log_files_in", "publish_folder", "staging_folder", "writing"]


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_dev, status.st_ino)


def _real(path: Path) -> Path:
    """``path`` with every symbolic link resolved, also when its last part does not exist."""
    return Path(os.path.realpath(path))


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _pattern_names(target: Path, pattern: str) -> list[Path]:
    """The existing files in ``target``'s folder whose names ``target``'s name expands to (digits for ``pattern``)."""
    head, _, tail = target.name.partition(pattern)
    rest = re.escape(tail).replace(re.escape(pattern), r"\d+")
    matcher = re.compile(re.escape(head) + r"\d+" + rest)
    try:
        return sorted(p for p in target.parent.iterdir() if matcher.fullmatch(p.name))
    except OSError:
        return []


def check_target(
    target: str | os.PathLike[str],
    *,
    overwrite: bool,
    reads: Iterable[str | os.PathLike[str]] = (),
    found: Iterable[Path] = (),
    folder: bool = False,
    pattern: str | None = None,
) -> None:
    """Raise :class:`OutputError` unless ``target`` can be written (see the module's rules).

    ``reads``: the paths the command reads, as given (files or folders);
    ``found``: the files found under them (a log's files, through symbolic
    links to folders too).  ``folder``: the command writes a folder there.
    ``pattern``: a placeholder in the name that expands to digits
    (``{rollout_id}``); every existing name it expands to is checked.
    """
    target = Path(target)
    names = _pattern_names(target, pattern) if pattern is not None and pattern in target.name else [target]
    read_paths = [Path(p) for p in reads]
    input_ids = {i for i in (_file_id(p) for p in [*read_paths, *found] if not p.is_dir()) if i is not None}
    read_folders = [_real(p) for p in read_paths if p.is_dir()]
    real_target = _real(target)
    for name in names:
        file_id = _file_id(name)
        if file_id is not None and file_id in input_ids:
            raise OutputError(
                f"is one of the input files ({_real(name)}): writing the output there would replace it",
                file=name,
                tip="write the output outside the log, or under another name",
            )
    for read in read_folders:
        if folder and (_inside(read, real_target) or _inside(real_target, read)):
            raise OutputError(
                f"the output folder and the folder read ({read}) overlap: the output would replace or join the "
                "input",
                file=target,
                tip="write the new log into a folder outside the one read",
            )
        if not folder and real_target.name.endswith(".parquet") and _inside(real_target, read):
            raise OutputError(
                f"is inside the folder read ({read}): every later command on that folder would read it as part "
                "of the log",
                file=target,
                tip="write the output outside the log folder",
            )
    if folder:
        for path in read_paths:
            if _inside(_real(path), real_target):
                raise OutputError(
                    f"holds an input ({path}): replacing the folder would lose it", file=target,
                    tip="write the new log into another folder",
                )
    for name in names:
        _check_kind(name, overwrite=overwrite, folder=folder)
    if not target.parent.is_dir():
        raise OutputError("the output's folder does not exist", file=target)


def _check_kind(target: Path, *, overwrite: bool, folder: bool) -> None:
    if target.is_symlink():
        if not target.exists():
            raise OutputError("is a broken symbolic link", file=target)
        raise OutputError(
            "is a symbolic link: the output is replaced by renaming, which would replace the link, not what it "
            "names",
            file=target,
            tip=f"name the target itself ({_real(target)})",
        )
    try:
        status = target.stat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(f"cannot use as output ({exc.strerror or exc})", file=target) from None
    if folder:
        if not stat.S_ISDIR(status.st_mode):
            raise OutputError("is not a folder: this command writes a folder", file=target)
        return  # whether it holds a log (and so needs overwrite) is the command's to say
    if stat.S_ISDIR(status.st_mode):
        raise OutputError("is a folder, not a file", file=target, tip="name a file inside it")
    if not stat.S_ISREG(status.st_mode):
        raise OutputError(
            "is not a regular file (a FIFO, device or socket): tito writes only regular files", file=target
        )
    if not overwrite:
        raise OutputError("output exists", file=target, tip="pass --overwrite to replace it")


@contextlib.contextmanager
def writing(target: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an ``OSError`` raised while writing ``target`` into :class:`OutputError` naming it (exit 5)."""
    try:
        yield
    except OSError as exc:
        raise write_error(exc, target) from None


def log_files_in(folder: Path, extra: Iterable[str] = ()) -> list[Path]:
    """The log files a folder holds, relative to it: ``*.parquet`` (not hidden) at any depth, and ``extra`` names.

    Symbolic links to folders are not followed: what they lead to is not the folder's to replace.
    """
    found: list[Path] = []
    wanted = set(extra)
    for top, folders, names in os.walk(folder):
        folders.sort()
        for name in sorted(names):
            if (name.endswith(".parquet") and not name.startswith(".")) or (top == str(folder) and name in wanted):
                found.append(Path(top, name).relative_to(folder))
    return found


def staging_folder(target: Path) -> Path:
    """A fresh hidden folder beside ``target`` (same file system) to write a new log into."""
    with writing(target):
        return Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))


def publish_folder(staging: Path, target: Path, replaced: Iterable[Path] = ()) -> None:
    """Move the files written into ``staging`` into ``target`` in place of its files ``replaced`` (relative).

    ``target`` absent: ``staging`` is renamed to it (which fails, leaving
    nothing half done, if another writer created it meanwhile).  Otherwise
    the old files are moved aside first, the new ones moved in, and the old
    ones removed; anything else in ``target`` (a README, a tokenizer folder)
    stays.  On any failure every file is moved back: ``target`` is as it
    was.  ``staging`` is removed in every case.
    """
    try:
        with writing(target):
            if not target.exists() and not target.is_symlink():
                os.rename(staging, target)
                fsync_directory(target.parent)
                return
            _swap(staging, target, list(replaced))
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _swap(staging: Path, target: Path, replaced: list[Path]) -> None:
    aside = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".replaced", dir=target.parent))
    new = log_files_in(staging, extra=[p.name for p in staging.iterdir() if p.is_file()])
    moved: list[Path] = []
    placed: list[Path] = []
    try:
        for rel in replaced:
            (aside / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(target / rel, aside / rel)
            moved.append(rel)
        for rel in new:
            if (target / rel).exists() or (target / rel).is_symlink():
                raise OutputError(
                    f"holds {rel}, which is not part of the log it replaces: it is kept, and nothing written",
                    file=target,
                    tip="move it away, or write the log into another folder",
                )
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / rel, target / rel)
            placed.append(rel)
    except BaseException:
        for rel in reversed(placed):
            with contextlib.suppress(OSError):
                os.replace(target / rel, staging / rel)
        for rel in reversed(moved):
            with contextlib.suppress(OSError):
                os.replace(aside / rel, target / rel)
        shutil.rmtree(aside, ignore_errors=True)
        raise
    fsync_directory(target)
    shutil.rmtree(aside, ignore_errors=True)
