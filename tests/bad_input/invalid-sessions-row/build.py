"""Sessions rows with a NaN reward, and with metadata that is JSON but not an object."""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    write_turns(log / "turns-bad.parquet", case(BASE, "bad-reward") + case(BASE, "bad-metadata"))
    write_sessions(
        log / "sessions-bad.parquet",
        [
            dict(case_session(BASE, "bad-reward"), reward=float("nan")),
            dict(case_session(BASE, "bad-metadata"), metadata="[1, 2]"),
        ],
    )
