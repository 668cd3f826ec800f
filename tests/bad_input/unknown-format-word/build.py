"""A sessions file whose tito.format is not a version at all ("banana")."""

import pyarrow as pa
import pyarrow.parquet as pq

from tests.bad_input.kit import write_good


def build(log):
    write_good(log)
    metadata = {"tito.table": "sessions", "tito.format": "banana"}
    table = pa.table({"session_id": ["x"], "reward": [1.0]}, metadata=metadata)
    pq.write_table(table, log / "sessions-banana.parquet")
