"""The same sessions row written twice (a retried flush): harmless, the session is rebuilt."""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    write_turns(log / "turns-twice.parquet", case(BASE, "twice"))
    row = case_session(BASE, "twice")
    write_sessions(log / "sessions-1.parquet", [row])
    write_sessions(log / "sessions-2.parquet", [row, row])
