"""A prompt message with no role, and one whose role is not a string."""

from tests.bad_input.kit import case, write_good, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    no_role = case(BASE, "bad-no-role")
    del no_role[1]["prompt_messages"][1]["role"]
    numeric = case(BASE, "bad-numeric-role")
    numeric[3]["prompt_messages"][0]["role"] = 7
    write_turns(log / "turns-bad.parquet", no_role + numeric)
