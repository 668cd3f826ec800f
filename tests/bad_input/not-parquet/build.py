"""A JSONL file renamed to .parquet."""

import json

from tests.bad_input.kit import case, write_good


def build(log):
    write_good(log)
    lines = [json.dumps(t) for t in case("cases-threshold-1024/case-3.7", "s")]
    (log / "turns-0001.parquet").write_text("\n".join(lines) + "\n")
