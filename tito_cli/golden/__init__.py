"""Golden dumps for CI: deterministic text dumps of sessions, checked against stored ones.

dump.py     one session → text (header, turns, tree, packing, span lines)
compare.py  a log vs a folder of dumps: passed / changed / new / stale, update
report.py   a check as coloured text or a JSON-ready dict
"""

from .compare import (
    CheckReport,
    DumpSummary,
    GoldenOptions,
    SessionCheck,
    SessionDump,
    Status,
    check_goldens,
    iter_dumps,
    write_dumps,
)
from .serialize import dump_session

__all__ = [
    "CheckReport",
    "DumpSummary",
    "GoldenOptions",
    "SessionCheck",
    "SessionDump",
    "Status",
    "check_goldens",
    "dump_session",
    "iter_dumps",
    "write_dumps",
]
