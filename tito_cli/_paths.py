"""Paths tito knows and writes: the fixture tokenizer's, file names derived from session ids
(untrusted), and output targets checked.

An output target must be absent or a regular file (never a folder, FIFO or
device, which a rename would replace or a write would block on), and never
one of the files being read (the turns would be lost for the samples).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import OutputError
from .schema import META_TABLE

__all__ = [
    "FIXTURE_TOKENIZER",
    "PACKAGED_TOKENIZER",
    "check_output_target", "leave_out_previous_output",
    "safe_filename",
]

#: The tokenizer shipped in the repository (relative to its root), used by the simulator; the
#: name its logs record.
FIXTURE_TOKENIZER = "fixtures/tokenizer"
#: The same files inside the package, so the simulator (and decoding its logs) works after a
#: non-editable install, from any folder (fixtures/tokenizer/build.py writes both).
PACKAGED_TOKENIZER = Path(__file__).resolve().parent / "simulate" / "tokenizer"

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_filename(session_id: str, suffix: str = "") -> str:
    """A file name for ``session_id`` that cannot leave its folder or collide.

    Characters outside ``[A-Za-z0-9._-]`` become ``_``, a leading dot is
    replaced (no hidden files, no ``..``), and when anything was changed a
    short hash of the real id is appended so two ids never share a name.
    """
    name = _UNSAFE.sub("_", session_id)
    if name.startswith("."):
        name = "_" + name[1:]
    name = name[:150]
    if name != session_id or not name:
        digest = hashlib.sha256(session_id.encode("utf-8")).hexdigest()[:10]
        name = f"{name}-{digest}"
    return name + suffix


def check_output_target(target: Path, *, overwrite: bool) -> None:
    """Raise :class:`OutputError` unless ``target`` can be (re)placed by a new regular file.

    Checked before anything is read or written: an existing target needs
    ``overwrite``, and must be a regular file (after symlinks), whatever the
    flags; its folder must exist.
    """
    try:
        status = target.stat()
    except FileNotFoundError:
        status = None
    except OSError as exc:
        raise OutputError(f"cannot use as output ({exc.strerror or exc})", file=target) from None
    if status is not None:
        if stat.S_ISDIR(status.st_mode):
            raise OutputError("is a folder, not a file", file=target, tip="name a file inside it")
        if not stat.S_ISREG(status.st_mode):
            raise OutputError(
                "is not a regular file (a FIFO, device or socket): tito writes only regular files", file=target
            )
        if not overwrite:
            raise OutputError("output exists", file=target, tip="pass --overwrite to replace it")
    elif target.is_symlink():
        raise OutputError("is a broken symbolic link", file=target)
    if not target.parent.is_dir():
        raise OutputError("the output's folder does not exist", file=target)


def leave_out_previous_output(
    files: Sequence[Path], inputs: Iterable[str | os.PathLike[str]], targets: Iterable[Path]
) -> list[Path]:
    """``files`` (found under ``inputs``) without a previous rebuild's output; raise if a target is an input.

    A rebuild may write into its log's folder: the samples file left there
    by the previous run is not part of the log and is left out.  Any other
    file that a target names, after symlinks (a turns or sessions file, a
    file given on the command line), is input the rebuild would replace with
    its output: :class:`OutputError`, whatever the flags.
    """
    target_ids: dict[tuple[int, int], Path] = {}
    for target in targets:
        file_id = _file_id(target)
        if file_id is not None:
            target_ids[file_id] = target
    if not target_ids:
        return list(files)
    given = {_file_id(Path(p)) for p in inputs if Path(p).is_file()}
    kept: list[Path] = []
    for path in files:
        file_id = _file_id(path)
        named_by = target_ids.get(file_id) if file_id is not None else None
        if named_by is None:
            kept.append(path)
        elif file_id not in given and _holds_samples(path):
            continue  # the previous output, inside the log folder
        else:
            raise OutputError(
                f"is one of the input files ({path}): writing the output there would replace it",
                file=named_by,
                tip="write the samples outside the log, or under another name",
            )
    return kept


def _file_id(path: Path) -> tuple[int, int] | None:
    try:
        status = path.stat()
    except OSError:
        return None
    return (status.st_dev, status.st_ino)


def _holds_samples(path: Path) -> bool:
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return metadata.get(META_TABLE.encode()) == b"samples"
