"""A file with a turns table's columns whose tito.table says sessions: read as sessions, its turns would be lost."""

import pyarrow.parquet as pq

from tests.bad_input.kit import case, turns_table, write_good

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    table = turns_table(case(BASE, "mislabelled"))
    tagged = table.replace_schema_metadata({**table.schema.metadata, b"tito.table": b"sessions"})
    pq.write_table(tagged, log / "turns-mislabelled.parquet")
