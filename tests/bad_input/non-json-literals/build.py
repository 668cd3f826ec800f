"""Sessions metadata that Python's json reads but that is not JSON, or not JSON once written back.

NaN, Infinity and -Infinity are not JSON; 1e400 is, but reads as infinity
and would come out as Infinity in every sample's metadata; a lone surrogate
escape reads as a str that UTF-8 cannot hold.  Each sessions row is rejected
(its session with it), so samples.metadata is always strict JSON.  A NaN
literal in a turn's metadata rejects that session too.
"""

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

BASE = "cases-threshold-1024/case-3.7"
BAD_METADATA = {
    "nan": '{"score": NaN}',
    "minus-infinity": '{"score": -Infinity}',
    "overflow": '{"score": 1e400}',
    "lone-surrogate": '{"name": "\\ud800"}',
}


def build(log):
    write_good(log)
    turns = [t for name in BAD_METADATA for t in case(BASE, f"bad-{name}")]
    turn_nan = case(BASE, "bad-turn-metadata")
    turn_nan[2]["metadata"] = '{"temperature": NaN}'
    write_turns(log / "turns-bad.parquet", turns + turn_nan)
    write_sessions(
        log / "sessions-bad.parquet",
        [dict(case_session(BASE, f"bad-{name}"), metadata=text) for name, text in BAD_METADATA.items()],
    )
