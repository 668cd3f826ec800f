"""Malformed JSON in every JSON column of both tables; each spoils only its own session."""

import json

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    turns = []
    for sid, column, text in [
        ("bad-prompt", "prompt_messages", '[{"role": "system", "content": "S"'),
        ("bad-response", "response_message", '{"role": "assistant", content: "x"}'),
        ("bad-tools", "tools", "[{]"),
        ("bad-metadata", "metadata", "{'single': 'quotes'}"),
    ]:
        session = case(BASE, sid)
        session[2][column] = text
        turns += session
    # A prompt that extends the previous turn's prompt (the reader's incremental
    # parse path) but ends in a trailing comma.
    session = case(BASE, "bad-trailing-comma")
    previous = session[0]["prompt_messages"]
    session[1]["prompt_messages"] = json.dumps(previous, ensure_ascii=False)[:-1] + ",]"
    turns += session
    # Valid turns, but the sessions row's metadata is not JSON.
    turns += case(BASE, "bad-sessions-metadata")
    write_turns(log / "turns-bad.parquet", turns)
    row = case_session(BASE, "bad-sessions-metadata")
    write_sessions(log / "sessions-bad.parquet", [dict(row, metadata="{nope")])
