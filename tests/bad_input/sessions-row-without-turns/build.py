"""A sessions row whose session has no turns anywhere in the log: nothing to rebuild, but reported."""

from tests.bad_input.kit import write_good, write_sessions


def build(log):
    write_good(log)
    write_sessions(log / "sessions-orphan.parquet", [{"session_id": "orphan", "reward": 1.0}])
