"""Sessions in a folder reached through a symbolic link (a log assembled from several disks), and a link loop.

Folder links are followed (each folder searched once, so a loop ends), so
their sessions are rebuilt like any other.
"""

import os

from tests.bad_input.kit import case, case_session, write_good, write_sessions, write_turns

REF = "cases-threshold-1024/case-2.7"


def build(log):
    write_good(log)
    elsewhere = log.parent / "other-disk"
    write_turns(elsewhere / "turns-linked.parquet", case(REF, "linked"))
    write_sessions(elsewhere / "sessions-linked.parquet", [case_session(REF, "linked")])
    os.symlink(elsewhere, log / "linked")
    os.symlink("..", elsewhere / "loop")  # other-disk/loop -> the folder holding logs/ and other-disk/
