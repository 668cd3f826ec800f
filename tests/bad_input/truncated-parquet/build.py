"""A turns file cut in half (an interrupted copy between clusters)."""

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    path = write_turns(log / "turns-cut.parquet", case("random-threshold-1024/r7-0029", "s"))
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
