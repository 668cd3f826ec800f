"""Nulls in columns SPEC §2 declares non-null (the file's schema allows them)."""

from tests.bad_input.kit import case, write_good, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    turns = []
    for sid, column in [
        ("bad-prompt-ids", "prompt_ids"),
        ("bad-output-ids", "output_ids"),
        ("bad-seq", "seq"),
        ("bad-finish-reason", "finish_reason"),
        ("bad-prompt-messages", "prompt_messages"),
    ]:
        session = case(BASE, sid)
        session[4][column] = None
        turns += session
    write_turns(log / "turns-bad.parquet", turns)
