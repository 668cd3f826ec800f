"""prompt_messages that parse as JSON but are not an array of objects."""

from tests.bad_input.kit import case, write_good, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    turns = []
    for sid, text in [
        ("bad-object", '{"role": "user", "content": "hi"}'),
        ("bad-string", '"hello"'),
        ("bad-strings", '["system prompt", "hi"]'),
        ("bad-null-item", '[{"role": "system", "content": "S"}, null]'),
    ]:
        session = case(BASE, sid)
        session[1]["prompt_messages"] = text
        turns += session
    write_turns(log / "turns-bad.parquet", turns)
