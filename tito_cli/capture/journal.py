"""The write-ahead journal: each checked turn and finish appended to a file before it is acknowledged.

A process that records turns for others (``tito serve``) appends every checked turn and every finish
to its journal and answers only after the append returned: the bytes are then the operating
system's, and a SIGKILL of the process loses nothing (``fsync=True`` also survives a power loss).
The rows are written as Parquet files later; a journal *segment* is retired (removed) only after the
Parquet files built from it are in place, and those files are named after it
(``turns-<run>-<segment>.parquet`` from ``.tito-journal-<run>-<segment>.wal``), so that whoever
recovers a segment sees which of its files already exist and never writes a row twice.

A segment file starts with :data:`MAGIC` and one JSON line (the tokenizer the rows are recorded
with), then records, each ``<length u32> <crc32 u32> <payload>``: a payload is a kind byte (``T`` a
turn, ``F`` a finish), a JSON header (with any text cell beyond the known ones), then the turn's
texts (UTF-8) and ids (little-endian int32) and logprobs (float32) as raw bytes, then its routed-experts
rows (zstd of their int32 bytes) when it has them.  A record cut
short (a write interrupted by a kill) or whose checksum does not match ends the segment: it was
never acknowledged.  A failed append is cut off the file again before the error is raised, so the
records after it stay readable.  The writing process
holds an ``flock`` on each of its segments until it retires them; a segment nobody holds belongs to
a process that died.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import struct
import threading
import zlib
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import fsync_directory
from .provenance import compress_rows

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "MAGIC",
    "Journal",
    "JournalContents",
    "Segment",
    "decode_journal",
    "encode_finish",
    "encode_turn",
    "experts_cells",
    "journal_files",
    "journal_name",
    "parse_journal_name",
    "try_lock",
]

MAGIC = b"TITO-JOURNAL-1\n"
_RECORD = struct.Struct("<II")
_HEADER_LEN = struct.Struct("<I")
_NAME = re.compile(r"\.tito-journal-(?P<run>[A-Za-z0-9_-]+)-(?P<segment>[0-9]{6,})\.wal")
_TEXTS = ("prompt_messages", "response_message", "tools", "metadata")
_KNOWN = frozenset(
    {*_TEXTS, "session_id", "seq", "finish_reason", "ill_formed", "timestamp", "prompt_ids", "output_ids"}
    | {"output_logprobs"}
)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROSECOND = timedelta(microseconds=1)


def journal_name(run: str, segment: int) -> str:
    return f".tito-journal-{run}-{segment:06d}.wal"


def parse_journal_name(name: str) -> tuple[str, int] | None:
    """``(run, segment)`` of a journal file's name, or None for any other file."""
    match = _NAME.fullmatch(name)
    return None if match is None else (match["run"], int(match["segment"]))


def journal_files(directory: Path) -> list[Path]:
    """The journal segments in ``directory`` (not below), oldest segment of each run first."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = [(parsed, name) for name in names if (parsed := parse_journal_name(name)) is not None]
    return [directory / name for _, name in sorted(found)]


def try_lock(path: Path) -> int | None:
    """An fd holding ``path``'s exclusive lock, or None when a live process holds it (or it vanished)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    if fcntl is not None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
    return fd


# -- records -------------------------------------------------------------------------------


def encode_turn(row: dict[str, Any], experts: tuple[np.ndarray, int] | None = None) -> bytes:
    """The payload of a checked turns row (:func:`~tito_cli.capture.records.turn_row`'s, with seq and timestamp).

    ``experts``: the turn's routed-experts rows ``[rows, layers, topk]`` and their start, carried after
    the logprobs as zstd of their int32 bytes (:func:`decode_journal` gives them back as ``row["experts"]``).
    """
    texts = [None if row[name] is None else row[name].encode() for name in _TEXTS]
    prompt = np.ascontiguousarray(row["prompt_ids"], dtype="<i4")
    output = np.ascontiguousarray(row["output_ids"], dtype="<i4")
    logprobs = row["output_logprobs"]
    stamp = row["timestamp"]
    header = {
        "session_id": row["session_id"],
        "seq": row["seq"],
        "finish_reason": row["finish_reason"],
        "ill_formed": row["ill_formed"],
        "timestamp": None if stamp is None else (stamp - _EPOCH) // _MICROSECOND,
        "texts": [None if text is None else len(text) for text in texts],
        "ids": [int(prompt.size), int(output.size), None if logprobs is None else int(logprobs.size)],
    }
    # Any other text cell of the row (a column a later schema adds) travels in the header as it is.
    extra = {name: value for name, value in row.items() if name not in _KNOWN and isinstance(value, str)}
    if extra:
        header["cells"] = extra
    packed = None
    if experts is not None:
        rows, start = experts
        packed = compress_rows(rows)
        header["experts"] = [int(start), *(int(n) for n in rows.shape), len(packed)]
    parts = [b"T", *_header(header)]
    parts.extend(text for text in texts if text is not None)
    parts += [prompt.tobytes(), output.tobytes()]
    if logprobs is not None:
        parts.append(np.ascontiguousarray(logprobs, dtype="<f4").tobytes())
    if packed is not None:
        parts.append(packed)
    return b"".join(parts)


def encode_finish(fields: dict[str, Any]) -> bytes:
    """The payload of a finish: :meth:`TurnLogWriter.finish_session`'s arguments (metadata as JSON text)."""
    return b"".join([b"F", *_header(fields)])


def _header(header: dict[str, Any]) -> list[bytes]:
    data = json.dumps(header, ensure_ascii=False, separators=(",", ":")).encode()
    return [_HEADER_LEN.pack(len(data)), data]


@dataclass
class JournalContents:
    """What one segment holds: its tokenizer, its turns rows and finishes in order, and how it ended."""

    tokenizer: str | None
    turns: list[dict[str, Any]]
    finishes: list[dict[str, Any]]
    #: Bytes after the last whole record (a record cut short or failing its checksum; never acknowledged).
    dropped: int


def decode_journal(path: Path) -> JournalContents:
    """The records of a segment; ``ValueError`` for a file that is not a journal."""
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError(f"{path}: not a tito journal")
    end = data.find(b"\n", len(MAGIC))
    if end < 0:
        return JournalContents(None, [], [], len(data) - len(MAGIC))
    try:
        tokenizer = json.loads(data[len(MAGIC) : end]).get("tokenizer")
    except ValueError:
        raise ValueError(f"{path}: a journal with an unreadable first line") from None
    contents = JournalContents(tokenizer, [], [], 0)
    offset = end + 1
    while offset < len(data):
        if offset + _RECORD.size > len(data):
            break
        length, crc = _RECORD.unpack_from(data, offset)
        payload = data[offset + _RECORD.size : offset + _RECORD.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break
        kind, header, body = _split(payload)
        if kind == b"T":
            contents.turns.append(_turn(header, body))
        else:
            contents.finishes.append(header)
        offset += _RECORD.size + length
    contents.dropped = len(data) - offset
    return contents


def _split(payload: bytes) -> tuple[bytes, dict[str, Any], memoryview]:
    (size,) = _HEADER_LEN.unpack_from(payload, 1)
    start = 1 + _HEADER_LEN.size
    header = json.loads(payload[start : start + size])
    return payload[:1], header, memoryview(payload)[start + size :]


def _turn(header: dict[str, Any], body: memoryview) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": header["session_id"],
        "seq": header["seq"],
        "finish_reason": header["finish_reason"],
        "ill_formed": header["ill_formed"],
        "timestamp": None if header["timestamp"] is None else _EPOCH + header["timestamp"] * _MICROSECOND,
    }
    row.update(header.get("cells", {}))
    offset = 0
    for name, size in zip(_TEXTS, header["texts"], strict=True):
        row[name] = None if size is None else str(body[offset : offset + size], "utf-8")
        offset += size or 0
    prompt, output, logprobs = header["ids"]
    row["prompt_ids"] = np.frombuffer(body, "<i4", prompt, offset).astype(np.int32)
    offset += 4 * prompt
    row["output_ids"] = np.frombuffer(body, "<i4", output, offset).astype(np.int32)
    offset += 4 * output
    row["output_logprobs"] = None if logprobs is None else np.frombuffer(body, "<f4", logprobs, offset).copy()
    if header.get("experts") is not None:
        start, rows, layers, topk, size = header["experts"]
        offset += 4 * (logprobs or 0)
        raw = _unpack_rows(bytes(body[offset : offset + size]), 4 * rows * layers * topk)
        row["experts"] = (np.frombuffer(raw, "<i4").reshape(rows, layers, topk).astype(np.int32), start)
    return row


def experts_cells(row: dict[str, Any]) -> dict[str, Any]:
    """A decoded turn's ``experts`` (taken out of ``row``) as the turns table's cells: every row it carries."""
    experts = row.pop("experts", None)
    if experts is None:
        return row
    rows, start = experts
    row["routed_experts"] = compress_rows(rows)
    row["routed_experts_start"] = start
    row["routed_experts_layers"], row["routed_experts_topk"] = int(rows.shape[1]), int(rows.shape[2])
    return row


def _unpack_rows(packed: bytes, size: int) -> bytes:
    if not size:
        return b""
    import pyarrow as pa

    return bytes(pa.Codec("zstd").decompress(packed, decompressed_size=size, asbytes=True))


# -- the writing side ----------------------------------------------------------------------


@dataclass
class Segment:
    """One journal file being written or waiting to be retired; ``fd`` holds its lock."""

    number: int
    path: Path
    fd: int
    size: int
    records: int = 0


class Journal:
    """One process's journal in ``directory``: appends to the current segment, rotates, retires.

    Thread-safe.  ``OSError`` from :meth:`append` means the record is not in the journal (the
    partial bytes were cut off again); if they could not be cut off, the journal refuses every
    further append (:attr:`broken` says why).
    """

    def __init__(self, directory: Path, run: str, *, tokenizer: str | None, fsync: bool = False) -> None:
        self.directory = directory
        self.run = run
        self.tokenizer = tokenizer
        self.fsync = fsync
        self.broken: str | None = None
        self._lock = threading.Lock()
        self._next_number = 1
        self.current = self._open()

    def _open(self) -> Segment:
        number = self._next_number
        path = self.directory / journal_name(self.run, number)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        try:
            if fcntl is not None:
                with contextlib.suppress(OSError):  # a filesystem without locks
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            head = MAGIC + json.dumps({"tokenizer": self.tokenizer}).encode() + b"\n"
            _write_all(fd, head)
            os.fsync(fd)
            fsync_directory(self.directory)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                path.unlink()
            raise
        self._next_number += 1
        return Segment(number, path, fd, len(head))

    def append(self, payload: bytes) -> None:
        """Append one record (``fsync`` when asked) and check the file is still in its folder."""
        record = _RECORD.pack(len(payload), zlib.crc32(payload)) + payload
        with self._lock:
            if self.broken is not None:
                raise OSError(self.broken)
            segment = self.current
            try:
                _write_all(segment.fd, record)
                if self.fsync:
                    os.fsync(segment.fd)
                if os.fstat(segment.fd).st_nlink == 0:
                    gone = "the journal was removed from the log folder"
                    raise FileNotFoundError(errno.ENOENT, gone, segment.path.name)
            except OSError:
                try:
                    os.ftruncate(segment.fd, segment.size)
                except OSError as exc:
                    self.broken = f"the journal {segment.path} cannot be repaired after a failed write: {exc}"
                raise
            segment.size += len(record)
            segment.records += 1

    def rotate(self) -> Segment | None:
        """Start a new segment; returns the old one (None when it holds no record). ``OSError`` keeps the old one."""
        with self._lock:
            old = self.current
            if old.records == 0:
                return None
            self.current = self._open()
            return old

    def retire(self, segment: Segment) -> None:
        """Remove a segment whose rows are all in Parquet files, then release its lock."""
        with contextlib.suppress(FileNotFoundError):
            segment.path.unlink()
        fsync_directory(self.directory)
        os.close(segment.fd)

    def close(self) -> None:
        """Retire the current segment if it holds no record, else just release it (it will be recovered)."""
        segment = self.current
        if segment.records == 0:
            self.retire(segment)
        else:
            os.close(segment.fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
