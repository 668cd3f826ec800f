"""The capture writer: seq assignment, flush triggers, files, threads, SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tito_cli.capture.writer import TurnLogWriter
from tito_cli.read.turnlog import TurnLog
from tito_cli.schema import META_FORMAT, META_TABLE, META_TOKENIZER

from .helpers import REPO

MESSAGES = [{"role": "user", "content": "hi"}]
RESPONSE = {"role": "assistant", "content": "hello"}


def record(writer: TurnLogWriter, sid: str, **kwargs: object) -> int:
    return writer.record_turn(sid, [1, 2], [3], [-0.5], "stop", MESSAGES, RESPONSE, **kwargs)  # type: ignore[arg-type]


def all_rows(directory: Path) -> list[dict[str, object]]:
    rows = []
    for f in sorted(directory.glob("*.parquet")):
        rows.extend(pq.read_table(f).to_pylist())
    return rows


def test_seq_is_assigned_per_session_in_arrival_order(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None) as w:
        assert [record(w, "a"), record(w, "b"), record(w, "a")] == [0, 0, 1]
        assert record(w, "a", seq=10) == 10
        assert record(w, "a") == 11  # explicit seq moves the counter past it
    rows = all_rows(tmp_path)
    assert sorted((r["session_id"], r["seq"]) for r in rows) == [("a", 0), ("a", 1), ("a", 10), ("a", 11), ("b", 0)]


def test_files_carry_table_metadata_and_keep_sessions_together(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, tokenizer="fixtures/tokenizer", max_age=None) as w:
        for sid in ["b", "a", "b", "a"]:
            record(w, sid)
        w.finish_session("a", 1.0, index=3, group_index=1, label="ok", metadata={"k": 1})
    turns_file, sessions_file = w.files_written
    meta = pq.read_schema(turns_file).metadata
    assert meta[META_TABLE.encode()] == b"turns" and meta[META_FORMAT.encode()] == b"2"
    assert meta[META_TOKENIZER.encode()] == b"fixtures/tokenizer"
    assert pq.read_schema(sessions_file).metadata[META_TABLE.encode()] == b"sessions"
    table = pq.read_table(turns_file)
    # The second turn of each session repeats the first's prompt: stored against it.
    assert table.column("base_seq").to_pylist() == [None, 0, None, 0]
    assert table.column("session_id").to_pylist() == ["a", "a", "b", "b"]
    assert json.loads(table.column("prompt_messages")[0].as_py()) == MESSAGES
    assert pq.read_table(sessions_file).to_pylist()[0]["metadata"] == '{"k": 1}'
    log = TurnLog.open([tmp_path])
    assert log.tokenizer == "fixtures/tokenizer"
    assert [f.table for f in log.files] == ["sessions", "turns"]


def test_flush_on_row_count(tmp_path: Path) -> None:
    w = TurnLogWriter(tmp_path, max_rows=3, max_age=None)
    for _ in range(7):
        record(w, "a")
    assert len(w.files_written) == 2
    w.close()
    assert len(w.files_written) == 3
    assert len(all_rows(tmp_path)) == 7


def test_flush_on_byte_size(tmp_path: Path) -> None:
    w = TurnLogWriter(tmp_path, max_bytes=10_000, max_age=None)
    w.record_turn("a", list(range(3000)), [1], None, "stop", MESSAGES, None)
    assert len(w.files_written) == 1  # 12 kB of ids crossed the 10 kB bound
    w.close()


def test_flush_on_age(tmp_path: Path) -> None:
    w = TurnLogWriter(tmp_path, max_age=0.2)
    record(w, "a")
    deadline = time.monotonic() + 10
    while not w.files_written and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(w.files_written) == 1
    w.close()


def test_no_partial_or_temporary_files_are_left(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_rows=2, max_age=None) as w:
        for _ in range(5):
            record(w, "a")
    assert sorted(p.suffix for p in tmp_path.iterdir()) == [".parquet"] * 3


def test_closed_writer_refuses_records(tmp_path: Path) -> None:
    w = TurnLogWriter(tmp_path, max_age=None)
    w.close()
    with pytest.raises(RuntimeError, match="closed"):
        record(w, "a")


def test_threads_lose_nothing_and_seqs_stay_unique(tmp_path: Path) -> None:
    w = TurnLogWriter(tmp_path, max_rows=50, max_age=None)

    def work(k: int) -> None:
        for _ in range(200):
            record(w, f"s{k % 3}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    rows = all_rows(tmp_path)
    assert len(rows) == 1200
    for sid in ("s0", "s1", "s2"):
        assert sorted(r["seq"] for r in rows if r["session_id"] == sid) == list(range(400))


KILL_SCRIPT = """
import sys, threading
sys.path.insert(0, {repo!r})
from tito_cli.capture.writer import TurnLogWriter
w = TurnLogWriter({out!r}, max_rows=40, max_age=None)
def work(k):
    i = 0
    while True:
        w.record_turn(f"s{{k}}", list(range(200)), [1, 2, 3], [-0.5, -0.5, -0.5], "stop",
                      '[{{"role": "user", "content": "x"}}]', None, metadata={{"i": i}})
        i += 1
for k in range(4):
    threading.Thread(target=work, args=(k,), daemon=True).start()
threading.Event().wait()
"""


def test_sigkill_leaves_only_readable_files(tmp_path: Path) -> None:
    out = tmp_path / "log"
    script = KILL_SCRIPT.format(repo=str(REPO), out=str(out))
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if out.is_dir() and len(list(out.glob("*.parquet"))) >= 5:
                break
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    files = sorted(out.glob("*.parquet"))
    assert len(files) >= 5
    for f in files:
        assert pq.read_table(f).num_rows >= 40  # every file is complete and readable
    # Temporary files may remain (killed mid-write) but are never named *.parquet.
    assert all(p.name.startswith(".") for p in out.iterdir() if p.suffix != ".parquet")
    # Buffers are swapped out whole, in order, under the lock that assigns seqs:
    # what reached disk is, per session, every turn up to some point - a prefix.
    by_session: dict[str, list[int]] = {}
    for f in files:
        for r in pq.read_table(f, columns=["session_id", "seq"]).to_pylist():
            by_session.setdefault(r["session_id"], []).append(r["seq"])
    assert by_session
    for seqs in by_session.values():
        assert sorted(seqs) == list(range(len(seqs)))
