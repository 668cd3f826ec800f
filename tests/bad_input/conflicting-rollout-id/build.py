"""Two sessions rows for one session that agree on everything but rollout_id."""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    write_turns(log / "turns-twice.parquet", case(BASE, "twice"))
    row = case_session(BASE, "twice")
    write_sessions(log / "sessions-1.parquet", [dict(row, rollout_id=41)])
    write_sessions(log / "sessions-2.parquet", [dict(row, rollout_id=42)])
