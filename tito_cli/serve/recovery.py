"""The gateway's start-up on its log folder: dead writers' leftovers cleared, every session's state rebuilt.

* ``.turns-*.tmp`` files a killed writer left are removed (:func:`~tito_cli.capture.log_files.sweep_temporaries`).
* Every journal segment nobody holds (a gateway that died) is adopted: its rows are written as the
  Parquet files named after it — those of its files that are not there yet, so that a crash between a
  file's rename and the segment's removal never writes a row twice — then the segment is removed.
* The registry: each session's next ``seq`` and whether it finished, from the log's turns files (the
  read path's index pass: ``session_id`` and ``seq`` only) and its sessions files, the journals of
  gateways still running on the folder included (read as files: :mod:`tito_cli.read.journals`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from .._atomic import fsync_directory
from ..capture.journal import decode_journal, journal_files, parse_journal_name, try_lock
from ..capture.log_files import sweep_temporaries
from ..capture.records import turn_row
from ..capture.writer import TurnLogWriter
from ..errors import TitoError
from ..read.files import classify_file, discover_files
from ..read.index_pass import FileIndex, index_file

__all__ = ["Known", "adopt_journals", "known_sessions"]

log = logging.getLogger("tito.serve")


@dataclass
class Known:
    """Every session the folder knows: its next ``seq``, and the ids of the finished ones."""

    next_seq: dict[str, int] = field(default_factory=dict)
    finished: set[str] = field(default_factory=set)

    def turn(self, session_id: str, seq: int) -> None:
        if seq + 1 > self.next_seq.get(session_id, 0):
            self.next_seq[session_id] = seq + 1


def adopt_journals(directory: Path) -> int:
    """Sweep stale temporaries, write every dead gateway's journal segments as Parquet; returns the turns adopted."""
    for path in sweep_temporaries(directory):
        log.info("tito serve: removed %s, left by a killed writer", path.name)
    adopted = 0
    for path in journal_files(directory):
        fd = try_lock(path)
        if fd is None:
            continue  # a live gateway's
        try:
            if os.fstat(fd).st_nlink:  # (else another gateway adopted it while this one waited for the lock)
                adopted += _adopt(directory, path)
        finally:
            os.close(fd)
    return adopted


def _adopt(directory: Path, path: Path) -> int:
    parsed = parse_journal_name(path.name)
    assert parsed is not None
    run, number = parsed
    contents = decode_journal(path)
    if contents.dropped:
        log.warning(
            "tito serve: %s ends with %d bytes that are not a whole record (a write cut short; never answered)",
            path.name,
            contents.dropped,
        )
    turns = contents.turns if not (directory / f"turns-{run}-{number:06d}.parquet").exists() else []
    finishes = contents.finishes if not (directory / f"sessions-{run}-{number:06d}.parquet").exists() else []
    if turns or finishes:
        writer = TurnLogWriter(
            directory, tokenizer=contents.tokenizer, name=run, max_age=None, max_rows=1 << 62, max_bytes=1 << 62
        )
        for row in turns:
            experts = row.pop("experts", None)
            checked = turn_row(
                row["session_id"],
                row["prompt_ids"],
                row["output_ids"],
                row["output_logprobs"],
                row["finish_reason"],
                row["prompt_messages"],
                row["response_message"],
                row["tools"],
                row["metadata"],
                seq=row["seq"],
                timestamp=row["timestamp"],
                ill_formed=row["ill_formed"],
            )
            # The cells the journal carried beyond the checked ones (columns a later schema adds).
            checked.row.update((name, value) for name, value in row.items() if name not in checked.row)
            writer.record_checked(checked, row["seq"], experts)
        for fields in finishes:
            writer.finish_session(**fields)
        writer.write_rows(*writer.take_buffer(), number)
        writer.close()
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fsync_directory(directory)
    log.warning("tito serve: adopted %s: %d turns, %d finishes", path.name, len(turns), len(finishes))
    return len(turns)


def known_sessions(directory: Path) -> Known:
    """What the log in ``directory`` says about every session (live gateways' journals included: read/journals.py)."""
    known = Known()
    for path in discover_files([directory]):
        try:
            log_file = classify_file(path)
            if log_file.table == "turns":
                _index_turns(known, index_file(log_file, None))
            else:
                ids = pq.read_table(path, columns=["session_id"]).column(0).to_pylist()
                known.finished.update(sid for sid in ids if sid is not None)
        except TitoError as exc:
            log.warning("tito serve: %s (its sessions are not known to this gateway)", exc)
    return known


def _index_turns(known: Known, part: FileIndex) -> None:
    if not part.session_ids:
        return
    usable = ~part.seq_null
    highest = np.full(len(part.session_ids), -1, dtype=np.int64)
    np.maximum.at(highest, part.local[usable], part.seq_values[usable].astype(np.int64))
    for sid, seq in zip(part.session_ids, highest.tolist(), strict=True):
        if seq >= 0:
            known.turn(sid, seq)
