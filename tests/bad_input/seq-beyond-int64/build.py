"""A uint64 seq column and a uint64 sessions index holding values above 2**63 - 1.

Unsigned 64-bit columns are integers (docs/spec.md §2 allows any integer type for
seq and index), but seq is ordered as int64 and index is written as int64:
a value beyond that is invalid input for its session, not a crash.
"""

import pyarrow as pa
import pyarrow.parquet as pq

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    big = case(BASE, "bad-seq")
    big[2]["seq"] = 2**64 - 1
    fine = case("cases-threshold-1024/case-2.7", "uint64-ok")
    write_turns(log / "turns-uint64.parquet", big + fine, types={"seq": pa.uint64()})
    write_sessions(log / "sessions-uint64.parquet", [case_session("cases-threshold-1024/case-2.7", "uint64-ok")])
    write_turns(log / "turns-index.parquet", case(BASE, "bad-index"))
    sessions = pa.table(
        {"session_id": ["bad-index"], "reward": [1.0], "index": pa.array([2**63], pa.uint64())},
        metadata={"tito.table": "sessions", "tito.format": "1"},
    )
    pq.write_table(sessions, log / "sessions-index.parquet")
