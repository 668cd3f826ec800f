"""Valid sessions in format 2 (docs/spec.md §9), their rows spread over format-1 and format-2 files in any order."""

import random

from tests.bad_input.kit import GOOD, case, case_session, delta_rows, write_sessions, write_turns


def build(log):
    rows = [row for new_id, ref in GOOD.items() for row in delta_rows(case(ref, new_id))]
    random.Random(18).shuffle(rows)
    # Rows stored whole may sit in a format-1 file; rows with a base need the format-2 columns.
    whole = [r for r in rows if r.get("base_seq") is None]
    deltas = [r for r in rows if r.get("base_seq") is not None]
    write_turns(log / "v1" / "turns-whole.parquet", whole)
    half = len(deltas) // 2
    write_turns(log / "v2" / "turns-late.parquet", deltas[:half], format=2)
    write_turns(log / "turns-early.parquet", deltas[half:], format=2)
    write_sessions(log / "sessions.parquet", [case_session(ref, new_id) for new_id, ref in GOOD.items()])
