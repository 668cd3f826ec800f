"""Files without tito schema metadata are recognised by their columns (SPEC §2)."""

import pyarrow as pa
import pyarrow.parquet as pq

from tests.bad_input.kit import GOOD, case, case_session, write_turns
from tito_cli.schema import SESSIONS_SCHEMA


def build(log):
    turns = [t for new_id, ref in GOOD.items() for t in case(ref, new_id)]
    write_turns(log / "part-0.parquet", turns, tagged=False)
    rows = [case_session(ref, new_id) for new_id, ref in GOOD.items()]
    columns = {f.name: [r.get(f.name) for r in rows] for f in SESSIONS_SCHEMA}
    pq.write_table(pa.table(columns), log / "part-1.parquet")
