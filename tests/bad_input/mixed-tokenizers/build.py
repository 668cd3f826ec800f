"""Two turns files that name different tokenizers: decoding one's ids with the other's would be silently wrong."""

import pyarrow.parquet as pq

from tests.bad_input.kit import case, turns_table, write_good

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    for name, tokenizer in (("a", b"Qwen/Qwen3-8B"), ("b", b"meta-llama/Llama-3.1-8B")):
        table = turns_table(case(BASE, name))
        tagged = table.replace_schema_metadata({**table.schema.metadata, b"tito.tokenizer": tokenizer})
        pq.write_table(tagged, log / f"turns-{name}.parquet")
