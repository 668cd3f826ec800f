"""Seqs 0, 1, 5, 6, 9: turns were lost in between. Allowed (seq only orders), but reported."""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    turns = case(BASE, "gappy")
    for turn, seq in zip(turns, [0, 1, 5, 6, 9], strict=True):
        turn["seq"] = seq
    write_turns(log / "turns-gappy.parquet", turns)
    write_sessions(log / "sessions-gappy.parquet", [case_session(BASE, "gappy")])
