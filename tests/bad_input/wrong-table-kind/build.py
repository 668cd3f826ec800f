"""A samples file (a previous rebuild's output) left inside the log folder."""

import pyarrow.parquet as pq

from tests.bad_input.kit import write_good
from tito_cli.schema import SAMPLES_SCHEMA, table_metadata


def build(log):
    write_good(log)
    schema = SAMPLES_SCHEMA.with_metadata(table_metadata("samples"))
    pq.write_table(schema.empty_table(), log / "old-samples.parquet")
