"""A live gateway's journal segments, as Parquet files the reader takes beside the log's own.

``tito serve`` answers a turn once it is in its journal (docs/serve.md); its Parquet files come up to
``--flush-every`` seconds later.  So that ``tito ls``, ``rebuild`` and ``inspect`` on a live folder see
every acknowledged turn, each journal segment found in a log folder is read into a turns table and a
sessions table, written to a private temporary folder (removed when the process exits).  A segment's
table is left out when the Parquet file the gateway names after it is there already (the segment is
being retired), so that no row is read twice.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq

from ..capture.journal import decode_journal, experts_cells, journal_files, parse_journal_name
from ..capture.log_files import sessions_table, turns_table
from ..capture.records import sessions_row

__all__ = ["journal_tables"]

_FOLDER: Path | None = None


def _private_folder() -> Path:
    global _FOLDER
    if _FOLDER is None:
        _FOLDER = Path(tempfile.mkdtemp(prefix="tito-journals-"))
        owner = os.getpid()

        def remove() -> None:
            if os.getpid() == owner:  # (not in a forked worker)
                shutil.rmtree(_FOLDER, ignore_errors=True)

        atexit.register(remove)
    return _FOLDER


def journal_tables(folder: Path) -> list[Path]:
    """Parquet files holding the rows of ``folder``'s journal segments (not below it) not yet in its own files."""
    tables: list[Path] = []
    for path in journal_files(folder):
        parsed = parse_journal_name(path.name)
        assert parsed is not None
        run, number = parsed
        try:
            contents = decode_journal(path)
        except (OSError, ValueError):
            continue  # retired since it was listed (its files are there), or not a journal
        turns = contents.turns if not (folder / f"turns-{run}-{number:06d}.parquet").exists() else []
        finishes = contents.finishes if not (folder / f"sessions-{run}-{number:06d}.parquet").exists() else []
        out = _private_folder() / f"{os.getpid()}-{len(os.listdir(_private_folder())):06d}"
        if turns:
            target = out.with_name(out.name + "-turns.parquet")
            turn_rows = [experts_cells(row) for row in turns]
            pq.write_table(turns_table(turn_rows, contents.tokenizer), target)
            tables.append(target)
        if finishes:
            rows = [sessions_row(**fields) for fields in finishes]
            target = out.with_name(out.name + "-sessions.parquet")
            pq.write_table(sessions_table(rows), target)
            tables.append(target)
    return tables
