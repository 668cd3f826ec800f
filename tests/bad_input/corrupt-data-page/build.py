"""A turns file whose footer is intact but whose column data was overwritten (bit rot, bad copy)."""

from tests.bad_input.kit import case, write_good, write_turns


def build(log):
    write_good(log)
    path = write_turns(log / "turns-rot.parquet", case("random-threshold-1024/r7-0029", "s"))
    data = bytearray(path.read_bytes())
    # Zero a stretch from byte 4 (after the magic) through most of the column chunks.
    end = len(data) // 2
    data[4:end] = bytes(end - 4)
    path.write_bytes(bytes(data))
