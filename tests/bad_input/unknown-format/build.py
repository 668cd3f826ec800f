"""A turns file that says it is turn-log format 3: this reader knows formats 1 and 2, so it stops, naming the file."""

import pyarrow.parquet as pq

from tests.bad_input.kit import case, turns_table, write_good

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    table = turns_table(case(BASE, "format-3"))
    tagged = table.replace_schema_metadata({**table.schema.metadata, b"tito.format": b"3"})
    pq.write_table(tagged, log / "turns-v3.parquet")
