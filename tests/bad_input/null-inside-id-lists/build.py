"""A null element inside a non-null prompt_ids, output_ids or output_logprobs list.

Read naively, a null int32 becomes -2147483648 (or the list shifts): a token
nobody generated in the training data.  The row is rejected, naming the
position of the null.
"""

from tests.bad_input.kit import case, write_good, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    turns = []
    for sid, column, position in [
        ("bad-prompt-ids", "prompt_ids", 3),
        ("bad-output-ids", "output_ids", 0),
        ("bad-logprobs", "output_logprobs", 1),
    ]:
        session = case(BASE, sid)
        session[4][column][position] = None
        turns += session
    write_turns(log / "turns-bad.parquet", turns)
