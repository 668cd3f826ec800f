"""JSON nested 10,000 deep in each JSON column of both tables: each spoils only its own session.

Python's parser gives up (RecursionError) long before that depth; the
session is rejected with a reason that says so, and every other session is
rebuilt.  A response nested 900 deep parses, but is too deep to route: that
session is rejected too (at its first row), never a crash.
"""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"
DEEP = "[" * 10_000 + "]" * 10_000
DEEP_OBJECT = '{"a":' * 10_000 + "1" + "}" * 10_000


def build(log):
    write_good(log)
    turns = []
    for sid, column, text in [
        ("deep-prompt", "prompt_messages", f'[{{"role": "user", "content": {DEEP}}}]'),
        ("deep-response", "response_message", DEEP_OBJECT),
        ("deep-tools", "tools", DEEP),
        ("deep-metadata", "metadata", DEEP_OBJECT),
    ]:
        session = case(BASE, sid)
        session[1][column] = text
        turns += session
    turns += case(BASE, "deep-sessions-metadata")
    routed = case(BASE, "deep-but-parsed")
    routed[2]["response_message"] = '{"role": "assistant", "content": "x", "deep": ' + "[" * 900 + "]" * 900 + "}"
    turns += routed
    write_turns(log / "turns-deep.parquet", turns)
    write_sessions(
        log / "sessions-deep.parquet",
        [dict(case_session(BASE, "deep-sessions-metadata"), metadata=DEEP_OBJECT)],
    )
