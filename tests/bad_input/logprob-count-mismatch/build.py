"""A turn records fewer logprobs than output ids: the session is rejected at that row."""

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    turns = case("cases-threshold-1024/case-2.7", "bad")
    turns[1]["output_logprobs"] = turns[1]["output_logprobs"][:-1]
    write_turns(log / "turns-bad.parquet", turns)
