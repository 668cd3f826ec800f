"""ill_formed stored as strings: the optional column must be a boolean."""

import pyarrow as pa

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    turns = case("cases-threshold-1024/case-3.7", "s")
    for t in turns:
        t["ill_formed"] = "yes"
    write_turns(log / "turns-broken.parquet", turns, types={"ill_formed": pa.string()})
