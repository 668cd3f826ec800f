"""A zero-byte file with a .parquet name (a writer that died before writing anything)."""

from tests.bad_input.kit import write_good


def build(log):
    write_good(log)
    (log / "turns-empty.parquet").write_bytes(b"")
