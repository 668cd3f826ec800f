"""A turns row without a session id cannot be given to any session: the file is unusable."""

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    turns = case("cases-threshold-1024/case-3.7", "s")
    turns[3]["session_id"] = None
    write_turns(log / "turns-broken.parquet", turns)
