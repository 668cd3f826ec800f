"""NaN and infinite logprobs (float32 and float64 files), beside a valid session in the same row group."""

import pyarrow as pa

from tests.bad_input.kit import case, write_good, write_turns

BASE = "cases-threshold-1024/case-2.7"


def build(log):
    write_good(log)
    nan = case(BASE, "bad-nan")
    nan[0]["output_logprobs"][1] = float("nan")
    pos = case(BASE, "bad-inf")
    pos[1]["output_logprobs"][0] = float("inf")
    # The reader checks a row group's logprobs at once and a row's own only when that fails:
    # a valid session in the row group of a NaN must still rebuild.
    beside = case(BASE, "good-beside-nan")
    write_turns(log / "turns-f32.parquet", nan + pos + beside)
    neg = case(BASE, "bad-neg-inf")
    neg[2]["output_logprobs"][-1] = float("-inf")
    write_turns(log / "turns-f64.parquet", neg, types={"output_logprobs": pa.list_(pa.float64())})
