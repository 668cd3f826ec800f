"""A turns file without output_ids: the whole rebuild stops, naming the file."""

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    write_turns(log / "turns-broken.parquet", case("cases-threshold-1024/case-3.7", "s"), drop=["output_ids"])
