"""A negative id in an int32 column, and an id beyond int32 in a file whose id columns are int64.

The negative id comes twice: in a file with column statistics (they show it,
so the reader checks every row of that row group) and in one written without
statistics (nothing vouches for the ids, so every row is checked).
"""

import pyarrow as pa
import pyarrow.parquet as pq

from tests.bad_input.kit import case, case_session, turns_table, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    negative = case(BASE, "bad-negative")
    negative[2]["output_ids"][0] = -5
    write_turns(log / "turns-int32.parquet", negative)
    unvouched = case(BASE, "bad-negative-no-statistics")
    unvouched[3]["prompt_ids"][1] = -7
    pq.write_table(turns_table(unvouched), log / "turns-no-statistics.parquet", write_statistics=False)
    too_big = case(BASE, "bad-too-big")
    too_big[3]["prompt_ids"][-1] = 2**31
    # int64 id columns are accepted (SPEC asks for int32); values must still fit.
    fine = case("cases-threshold-1024/case-2.7", "int64-ok")
    wide = pa.list_(pa.int64())
    write_turns(log / "turns-int64.parquet", too_big + fine, types={"prompt_ids": wide, "output_ids": wide})
    write_sessions(log / "sessions-int64.parquet", [case_session("cases-threshold-1024/case-2.7", "int64-ok")])
