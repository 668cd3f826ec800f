"""The capture writer: seq assignment, flush triggers, files, threads, SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.helpers import REPO
from tito_cli.capture.writer import TurnLogWriter
from tito_cli.read.turnlog import TurnLog
from tito_cli.schema import META_FORMAT, META_TABLE, META_TOKENIZER

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


# -- hostile records (issue #22): refused at record time, never corrupting or losing the buffer --

BAD_TURNS = [
    pytest.param({"session_id": None}, "session_id must be a str", id="none-session-id"),
    pytest.param({"session_id": 7}, "session_id must be a str", id="int-session-id"),
    pytest.param({"prompt_ids": 5}, "must be 1-D", id="scalar-ids"),
    pytest.param({"output_ids": [[1, 2], [3, 4]]}, "must be 1-D", id="2d-ids"),
    pytest.param({"prompt_ids": [1.7, 2.0]}, "must hold integers", id="float-ids"),
    pytest.param({"prompt_ids": __import__("numpy").array([2**32 + 5], dtype="int64")}, "outside", id="int64-wraps"),
    pytest.param({"prompt_ids": [2**70]}, "outside", id="huge-python-int"),
    pytest.param({"output_ids": [-1]}, "outside", id="negative-id"),
    pytest.param({"finish_reason": 3}, "finish_reason must be a str", id="int-finish-reason"),
    pytest.param({"output_logprobs": [float("nan")]}, "NaN", id="nan-logprob"),
    pytest.param({"metadata": {"x": float("inf")}}, "cannot be stored as JSON", id="infinite-metadata"),
    pytest.param({"metadata": {"x": object()}}, "cannot be stored as JSON", id="unserialisable-metadata"),
    pytest.param({"seq": -1}, "seq must not be negative", id="negative-seq"),
]


@pytest.mark.parametrize(("bad", "message"), BAD_TURNS)
def test_a_bad_record_raises_at_record_turn_and_keeps_every_other_row(
    tmp_path: Path, bad: dict[str, object], message: str
) -> None:
    w = TurnLogWriter(tmp_path, max_age=None)
    record(w, "good")
    w.finish_session("good", 1.0)
    args: dict[str, object] = {
        "session_id": "bad", "prompt_ids": [1, 2], "output_ids": [3], "output_logprobs": [-0.5],
        "finish_reason": "stop", "prompt_messages": MESSAGES, "response_message": RESPONSE,
    }
    args.update(bad)
    with pytest.raises(ValueError, match=message):
        w.record_turn(**args)  # type: ignore[arg-type]
    w.close()
    rows = all_rows(tmp_path)
    assert [(r["session_id"], r.get("seq")) for r in rows if "seq" in r] == [("good", 0)]
    assert [r["session_id"] for r in rows if "reward" in r] == ["good"]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"session_id": None}, "session_id must be a str"),
        ({"reward": float("nan")}, "reward must be a finite number"),
        ({"reward": "1.0"}, "reward must be a finite number"),
        ({"index": 2**64}, "beyond int64"),
        ({"label": 3}, "label must be a str"),
        ({"metadata": [1, 2]}, "metadata must be a JSON object"),
        ({"metadata": {"s": "\ud800"}}, "not encodable as UTF-8"),
    ],
)
def test_a_bad_sessions_row_raises_at_finish_session(tmp_path: Path, bad: dict[str, object], message: str) -> None:
    w = TurnLogWriter(tmp_path, max_age=None)
    record(w, "good")
    args: dict[str, object] = {"session_id": "s", "reward": 1.0}
    args.update(bad)
    with pytest.raises(ValueError, match=message):
        w.finish_session(**args)  # type: ignore[arg-type]
    w.close()
    assert [r["session_id"] for r in all_rows(tmp_path)] == ["good"]


def test_ids_are_stored_exactly(tmp_path: Path) -> None:
    import numpy as np

    with TurnLogWriter(tmp_path, max_age=None) as w:
        w.record_turn("a", np.array([2**31 - 1, 0], dtype=np.uint64), (5, 6), None, "stop", MESSAGES, None)
    (row,) = all_rows(tmp_path)
    assert row["prompt_ids"] == [2**31 - 1, 0] and row["output_ids"] == [5, 6]


def test_a_failed_flush_keeps_its_rows_for_the_next(tmp_path: Path) -> None:
    folder = tmp_path / "log"
    w = TurnLogWriter(folder, max_age=None)
    record(w, "a")
    w.finish_session("a", 1.0)
    folder.rename(tmp_path / "gone")  # the folder vanishes: the write fails
    with pytest.raises(OSError):
        w.flush()
    record(w, "b")
    folder.mkdir()
    w.close()
    rows = all_rows(folder)
    assert sorted(r["session_id"] for r in rows if "seq" in r) == ["a", "b"]
    assert [r["session_id"] for r in rows if "reward" in r] == ["a"]


def test_the_age_thread_survives_a_failed_flush(tmp_path: Path) -> None:
    folder = tmp_path / "log"
    w = TurnLogWriter(folder, max_age=0.1)
    folder.rmdir()
    record(w, "a")
    deadline = time.monotonic() + 10
    while w.last_flush_error is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert isinstance(w.last_flush_error, OSError)
    folder.mkdir()
    while not w.files_written and time.monotonic() < deadline:
        time.sleep(0.02)
    assert w.files_written, "age-based flushing stopped after one failure"
    w.close()
    assert [r["session_id"] for r in all_rows(folder)] == ["a"]


def test_a_restarted_writer_with_the_same_name_never_replaces_files(tmp_path: Path) -> None:
    for run in range(2):
        with TurnLogWriter(tmp_path, max_age=None, name="fixed") as w:
            record(w, f"run{run}")
    rows = all_rows(tmp_path)
    assert sorted(r["session_id"] for r in rows) == ["run0", "run1"]
    assert len(list(tmp_path.glob("turns-fixed-*.parquet"))) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_writer_shared_across_fork_keeps_both_processes_rows(tmp_path: Path) -> None:
    w = TurnLogWriter(tmp_path, max_age=None, name="shared")
    record(w, "before-fork")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # 3.12+: fork() of a process with threads
        pid = os.fork()
    if pid == 0:  # the child: its own rows only
        try:
            record(w, "child")
            w.close()
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    record(w, "parent")
    w.close()
    rows = all_rows(tmp_path)
    assert sorted(r["session_id"] for r in rows) == ["before-fork", "child", "parent"]
