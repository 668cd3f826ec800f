"""A samples file (a previous rebuild's output) left inside the log folder."""

import pyarrow as pa
import pyarrow.parquet as pq

from tito_cli.schema import SAMPLES_SCHEMA, table_metadata

from tests.bad_input.kit import write_good


def build(log):
    write_good(log)
    schema = SAMPLES_SCHEMA.with_metadata(table_metadata("samples"))
    pq.write_table(schema.empty_table(), log / "old-samples.parquet")
