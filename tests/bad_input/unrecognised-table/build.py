"""A Parquet file of some other tool, with no tito metadata and unrelated columns."""

import pyarrow as pa
import pyarrow.parquet as pq

from tests.bad_input.kit import write_good


def build(log):
    write_good(log)
    pq.write_table(pa.table({"user": ["a", "b"], "score": [1.0, 2.0]}), log / "metrics.parquet")
