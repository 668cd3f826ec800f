"""NaN and infinite logprobs (float32 and float64 files)."""

import pyarrow as pa

from tests.bad_input.kit import case, write_good, write_turns

BASE = "cases-threshold-1024/case-2.7"


def build(log):
    write_good(log)
    nan = case(BASE, "bad-nan")
    nan[0]["output_logprobs"][1] = float("nan")
    pos = case(BASE, "bad-inf")
    pos[1]["output_logprobs"][0] = float("inf")
    write_turns(log / "turns-f32.parquet", nan + pos)
    neg = case(BASE, "bad-neg-inf")
    neg[2]["output_logprobs"][-1] = float("-inf")
    write_turns(log / "turns-f64.parquet", neg, types={"output_logprobs": pa.list_(pa.float64())})
