"""Sessions metadata with its own "tito" key, the key each sample's provenance is written under.

Replacing it would silently drop the user's value; nesting would move
provenance for everyone.  The sessions row is refused, saying which key to
rename.
"""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"


def build(log):
    write_good(log)
    write_turns(log / "turns-bad.parquet", case(BASE, "bad-tito-key"))
    write_sessions(
        log / "sessions-bad.parquet",
        [dict(case_session(BASE, "bad-tito-key"), metadata={"tito": "harness v2", "task": 7})],
    )
