"""A turns file that says it is turn-log format 2: this reader knows format 1 only, so it stops, naming the file."""

import pyarrow.parquet as pq

from tests.bad_input.kit import case, turns_table, write_good

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    table = turns_table(case(BASE, "format-2"))
    tagged = table.replace_schema_metadata({**table.schema.metadata, b"tito.format": b"2"})
    pq.write_table(tagged, log / "turns-v2.parquet")
