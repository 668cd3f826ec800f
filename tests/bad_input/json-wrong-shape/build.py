"""Valid JSON of the wrong shape in the turn's optional JSON columns (SPEC §2 gives each a shape)."""

from tests.bad_input.kit import case, write_good, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    turns = []
    for sid, column, text in [
        ("bad-response", "response_message", '[{"role": "assistant"}]'),
        ("bad-tools", "tools", '{"name": "bash"}'),
        ("bad-metadata", "metadata", '"just a string"'),
    ]:
        session = case(BASE, sid)
        session[3][column] = text
        turns += session
    # JSON null in a nullable column is the same as a null cell: valid.
    nulls = case(BASE, "json-nulls")
    for t in nulls:
        t["tools"] = t["metadata"] = "null"
    turns += nulls
    write_turns(log / "turns-bad.parquet", turns)
