"""Turns and sessions files with a valid schema and no rows: they contribute nothing, harmlessly."""

from tests.bad_input.kit import write_good, write_sessions, write_turns


def build(log):
    write_good(log)
    write_turns(log / "turns-none.parquet", [])
    write_sessions(log / "sessions-none.parquet", [])
