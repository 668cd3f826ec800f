"""A turns file with two columns named seq."""

import pyarrow.parquet as pq

from tests.bad_input.kit import case, turns_table, write_good


def build(log):
    write_good(log)
    table = turns_table(case("cases-threshold-1024/case-3.7", "s"))
    table = table.append_column("seq", table.column("seq"))
    pq.write_table(table, log / "turns-twice.parquet")
