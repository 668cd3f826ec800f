"""prompt_ids stored as a list of floats."""

import pyarrow as pa

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    turns = case("cases-threshold-1024/case-3.7", "s")
    for t in turns:
        t["prompt_ids"] = [float(i) for i in t["prompt_ids"]]
    write_turns(log / "turns-broken.parquet", turns, types={"prompt_ids": pa.list_(pa.float32())})
