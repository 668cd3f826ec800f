"""A turns file with some of format 2's reference columns but not all (docs/spec.md §9.3): the file is refused."""

from tests.bad_input.kit import case, delta_rows, write_good, write_turns


def build(log):
    write_good(log)
    rows = delta_rows(case("cases-threshold-1024/case-3.7", "partial"))
    write_turns(log / "turns-partial.parquet", rows, format=2, drop=["shared_messages"])
