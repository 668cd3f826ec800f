"""Parquet as tito writes and opens it: a CRC32 on every page, checked on every read.

A byte flipped in a data page (bit rot, a bad copy) can decode without an
error as different values: a token id changed, a logprob off, and samples
that differ with exit 0.  So every Parquet file tito writes (turn logs,
samples, the SkyRL and TRL exports, ``compact``'s output) carries page
checksums, and every file tito opens is checked against them; a mismatch is
an ``OSError`` from pyarrow, which the readers report as an unreadable log
(exit 4) naming the file.  Files written without checksums (older tito, other
writers) are read as before: there is nothing to check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["checked_scan_options", "open_parquet_file", "parquet_writer", "read_parquet_table"]


def parquet_writer(path: str | Path, schema: pa.Schema, **options: Any) -> pq.ParquetWriter:
    """``pq.ParquetWriter`` that writes a checksum with every page."""
    return pq.ParquetWriter(path, schema, write_page_checksum=True, **options)


def open_parquet_file(path: str | Path, **options: Any) -> pq.ParquetFile:
    """``pq.ParquetFile`` that checks every page it reads against its checksum."""
    return pq.ParquetFile(path, page_checksum_verification=True, **options)


def read_parquet_table(path: str | Path, **options: Any) -> pa.Table:
    """``pq.read_table``, every page checked against its checksum."""
    return pq.read_table(path, page_checksum_verification=True, **options)


def checked_scan_options() -> Any:
    """``pyarrow.dataset`` scan options that check every page against its checksum (for Ray Data's reader)."""
    import pyarrow.dataset as pds

    return pds.ParquetFragmentScanOptions(page_checksum_verification=True)
