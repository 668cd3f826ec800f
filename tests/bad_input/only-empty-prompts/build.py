"""A session whose every turn has an empty prompt_messages: valid, zero samples, and the summary says why."""

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    turns = case("cases-threshold-1024/case-3.7", "empty")
    for t in turns:
        t["prompt_messages"] = []
    # A session whose only outputs are empty: nothing to train, for another reason.
    silent = case("cases-threshold-1024/case-3.7", "silent")
    for t in silent:
        t["output_ids"] = []
        t["output_logprobs"] = None
    write_turns(log / "turns-empty.parquet", turns + silent)
