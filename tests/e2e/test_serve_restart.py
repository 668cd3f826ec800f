"""tito serve as a process: SIGKILL under load loses no answered turn, a restart continues every session,
start-up errors are one line with exit 2 or 5 and create nothing, and turns that could not be written
make a non-zero exit (docs/reliability.md, "tito serve")."""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import REPO
from tests.support.serve_helpers import QWEN3_NAME, Gateway, converse, free_port, need_extras
from tests.support.serve_standin import StandIn, qwen3_output
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild

need_extras("starlette", "uvicorn", "httpx")

import httpx  # noqa: E402

SESSIONS = 4
TURNS = 25


def reply(conversation: Any) -> str:
    """An answer that names the conversation it answers (every answer of a session differs)."""
    digest = hashlib.sha256(json.dumps(conversation, sort_keys=True).encode()).hexdigest()[:12]
    return qwen3_output(f"Answer {digest}.")


@pytest.fixture(scope="module")
def standin() -> Any:
    with StandIn(reply) as server:
        yield server




@pytest.mark.parametrize("api", ["chat", "generate"])  # generate: the gateway renders, holds and journals more
def test_sigkill_under_load_loses_no_answered_turn_and_a_restart_continues(
    standin: StandIn, tmp_path: Path, api: str
) -> None:
    logs = tmp_path / "logs"
    conversations = {f"kill-{k}": [{"role": "user", "content": f"task {k}"}] for k in range(SESSIONS)}
    answered: dict[str, list[str]] = {sid: [] for sid in conversations}
    seed = random.randrange(1 << 30)
    moment = random.Random(seed).uniform(0.3, 1.5)
    standin.delay = 0.02
    try:
        with Gateway(standin.url, logs, api=api) as gw:  # default flags: --flush-every 10, no --fsync
            threads = [
                threading.Thread(target=converse, args=(gw.url, sid, conversations[sid], answered[sid], TURNS))
                for sid in conversations
            ]
            for thread in threads:
                thread.start()
            time.sleep(moment)
            gw.terminate(signal.SIGKILL)
            for thread in threads:
                thread.join(timeout=60)
        before = {sid: len(a) for sid, a in answered.items()}
        assert sum(before.values()) < SESSIONS * TURNS, f"killed too late (seed {seed})"
        with Gateway(standin.url, logs, api=api) as gw:
            threads = [
                threading.Thread(target=converse, args=(gw.url, sid, conversations[sid], answered[sid], TURNS))
                for sid in conversations
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=120)
            for sid in conversations:
                assert httpx.post(
                    f"{gw.url}/sessions/{sid}/finish", json={"reward": 1.0}, timeout=60
                ).status_code == 200
            assert gw.terminate() == 0, gw.output()
    finally:
        standin.delay = 0.0
    assert all(len(a) == TURNS for a in answered.values()), (seed, before)
    log = TurnLog.open([logs])
    recorded = {rows.session_id: parse_session(rows) for rows in log.iter_sessions()}
    for sid, answers in answered.items():
        turns = recorded[sid]
        assert [t.seq for t in turns] == list(range(len(turns))), (seed, sid)
        contents = [t.response_message["content"] for t in turns]
        # Every answered turn is there, in order; at most the one in flight at the kill is extra.
        position = 0
        for content in answers:
            position = contents.index(content, position) + 1
        assert TURNS <= len(turns) <= TURNS + 1, (seed, sid, before)
    summary = rebuild([logs], tmp_path / "samples.parquet", workers=1)
    assert summary is not None and summary.rejected == [], (seed, summary.rejected)
    assert summary.sessions == SESSIONS


def _serve(logs: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tito_cli", "serve", "--logs", str(logs), *args]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)


def test_start_up_errors_are_one_line_exit_2_or_5_and_create_nothing(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    upstream = ["--upstream", "http://127.0.0.1:9", "--upstream-api", "chat", "--tokenizer", QWEN3_NAME]
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        busy = _serve(logs, *upstream, "--port", port)
    assert busy.returncode == 2, busy.stderr
    assert "cannot listen on" in busy.stderr and "Traceback" not in busy.stderr
    assert not logs.exists()

    missing = _serve(logs, "--upstream", "http://127.0.0.1:9", "--tokenizer", "no/such-tokenizer-here")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr, missing.stderr
    assert not logs.exists()

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    unwritable = _serve(blocker / "logs", *upstream, "--port", str(free_port()))
    assert unwritable.returncode == 5, unwritable.stderr
    assert "cannot be written" in unwritable.stderr and "Traceback" not in unwritable.stderr
    assert len(unwritable.stderr.strip().splitlines()) <= 2, unwritable.stderr


def test_answered_turns_that_could_not_be_written_make_a_non_zero_exit(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with Gateway(standin.url, logs, api="chat") as gw:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        # (bounded generously: the first answer of a loaded machine's gateway can take more than httpx's 5 s)
        first = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"x-api-key": "gone"}, timeout=60)
        assert first.status_code == 200
        shutil.rmtree(logs)
        refused = httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"x-api-key": "gone"}, timeout=60)
        assert refused.status_code == 503
        for _ in range(3):
            httpx.post(gw.url + "/v1/chat/completions", json=body, headers={"x-api-key": "gone"}, timeout=60)
        health = httpx.get(gw.url + "/healthz", timeout=60)
        assert health.status_code == 503 and "cannot be written" in health.json()["reason"]
        assert gw.terminate() == 5
        output = gw.output()
    assert "could not be written" in output
    # A line when the journal failed and one when the Parquet files could not be written: not one per request.
    assert len([line for line in output.splitlines() if "cannot be written" in line]) <= 2, output
    assert "Traceback" not in output


def test_the_listening_socket_is_tcp_so_answers_are_not_held_by_nagle() -> None:
    from tito_cli.serve.run import listen

    sock = listen("127.0.0.1", 0)
    try:
        # asyncio sets TCP_NODELAY on accepted connections only for a socket whose proto is TCP; without it
        # every answer waited ~40 ms for the client's delayed ACK.
        assert sock.proto == socket.IPPROTO_TCP
        with socket.create_connection(sock.getsockname()[:2]):
            accepted, _ = sock.accept()
            with accepted:
                assert accepted.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
