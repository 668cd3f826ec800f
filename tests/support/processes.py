"""Real processes in the crash and runner tests: their environment, a workload that takes a second or two
to rebuild, and a process's live children read from /proc."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow.parquet as pq

from tests.bad_input.kit import turns_table, write_sessions
from tests.support.helpers import CONFORMANCE, REPO, read_jsonl

ENV = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
TIMEOUT = 60


def write_workload(log: Path, copies: int) -> None:
    """``copies`` renamed copies of the generated conformance sessions: a rebuild of a second or two."""
    turns = read_jsonl(CONFORMANCE / "random-threshold-1024" / "turns.jsonl")
    sessions = read_jsonl(CONFORMANCE / "random-threshold-1024" / "sessions.jsonl")
    for c in range(copies):
        log.mkdir(parents=True, exist_ok=True)
        copy = [{**t, "session_id": f"c{c:02d}-{t['session_id']}"} for t in turns]
        pq.write_table(turns_table(copy), log / f"turns-{c:02d}.parquet")
        write_sessions(
            log / f"sessions-{c:02d}.parquet", [{**s, "session_id": f"c{c:02d}-{s['session_id']}"} for s in sessions]
        )


def children(pid: int) -> list[int]:
    """The live (not zombie) child processes of ``pid``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()
