"""tito serve's recorder: durable before acknowledged (docs/reliability.md, "tito serve").

In-process gateways (``httpx.ASGITransport`` over ``create_app``, the lifespan run) against the
stand-in: restarts continue ``seq`` and keep finished sessions finished, a finish waits for the
request in flight, an unknown session is a 404, a removed log folder is a 503 with ``/healthz``
failing; the journal's torn tail and a crash between a Parquet file's rename and its segment's
removal; start-up leftovers swept.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.serve_helpers import QWEN3_NAME, need_extras, recorder_of
from tests.support.serve_standin import StandIn, qwen3_output
from tito_cli.capture.journal import Journal, decode_journal, encode_finish, encode_turn, journal_files
from tito_cli.capture.records import turn_row
from tito_cli.capture.writer import RecordedTurn, TurnLogWriter
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild

need_extras("starlette", "httpx")

import httpx  # noqa: E402

from tito_cli.serve.app import Gateway, create_app  # noqa: E402
from tito_cli.serve.config import ServeConfig  # noqa: E402
from tito_cli.serve.exchange import ClientError, UpstreamError  # noqa: E402
from tito_cli.serve.recorder import Recorder  # noqa: E402


def reply(conversation: Any) -> str:
    return qwen3_output("Fine.")


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(reply) as server:
        yield server


@contextlib.asynccontextmanager
async def gateway(standin: StandIn, logs: Path, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An in-process gateway on ``logs`` (chat upstream), its lifespan run around the client."""
    config = ServeConfig(logs=logs, upstream=standin.url, upstream_api="chat", tokenizer=QWEN3_NAME, **options)
    app = create_app(config)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=30) as client:
            yield client


async def turn(client: httpx.AsyncClient, sid: str, text: str = "hi") -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return await client.post("/v1/chat/completions", json=body, headers={"x-api-key": sid})


def turns_in(logs: Path) -> dict[str, list[int]]:
    """Each session's recorded seqs (rows of all files, journals not included)."""
    log = TurnLog.open([logs])
    return {rows.session_id: [t.seq for t in parse_session(rows)] for rows in log.iter_sessions()}


def rejected(logs: Path, out: Path) -> int:
    summary = rebuild([logs], out, workers=1)
    assert summary is not None
    return len(summary.rejected)


def test_a_restarted_gateway_continues_seq_and_finished_stays_finished(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"

    async def first() -> None:
        async with gateway(standin, logs) as client:
            for sid in ("a", "a", "b"):
                assert (await turn(client, sid)).status_code == 200
            answer = await client.post("/sessions/b/finish", json={"reward": 1.0})
            assert answer.json() == {"session_id": "b", "finished": True, "reward": 1.0, "turns": 1}

    async def second() -> None:
        async with gateway(standin, logs) as client:
            assert (await turn(client, "a")).status_code == 200
            assert (await client.get("/sessions/a")).json()["turns"][0]["seq"] == 2
            refused = await turn(client, "b")
            assert refused.status_code == 409 and "finished" in refused.json()["error"]["message"]
            assert (await client.post("/sessions/b/finish", json={"reward": 0.0})).status_code == 409
            assert (await client.post("/sessions/a/finish", json={"reward": 0.5})).json()["turns"] == 3

    asyncio.run(first())
    asyncio.run(second())
    assert turns_in(logs) == {"a": [0, 1, 2], "b": [0]}
    assert rejected(logs, tmp_path / "samples.parquet") == 0
    assert journal_files(logs) == []


def test_a_killed_gateways_journal_is_adopted_at_start_up(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"

    async def killed() -> None:
        config = ServeConfig(logs=logs, upstream=standin.url, upstream_api="chat", tokenizer=QWEN3_NAME)
        app = create_app(config)
        recorder = recorder_of(app)

        async def die() -> None:  # like a SIGKILL: nothing written as Parquet, the journal's lock released
            assert recorder._ticker is not None and recorder.journal is not None
            recorder._ticker.cancel()
            os.close(recorder.journal.current.fd)

        recorder.close = die  # type: ignore[method-assign]
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
                assert (await turn(client, "k")).status_code == 200
                assert (await client.post("/sessions/k/finish", json={"reward": 1.0})).status_code == 200

    asyncio.run(killed())
    assert not list(logs.glob("*.parquet")) and len(journal_files(logs)) == 1

    async def restarted() -> None:
        async with gateway(standin, logs) as client:
            assert (await turn(client, "k")).status_code == 409  # finished, from the adopted journal
            assert (await turn(client, "m")).status_code == 200

    asyncio.run(restarted())
    assert turns_in(logs) == {"k": [0], "m": [0]}
    assert rejected(logs, tmp_path / "samples.parquet") == 0


def test_finish_waits_for_the_request_in_flight(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"

    async def run() -> None:
        async with gateway(standin, logs) as client:
            assert (await turn(client, "w")).status_code == 200
            standin.delay = 0.8
            try:
                slow = asyncio.get_running_loop().create_task(turn(client, "w"))
                await asyncio.sleep(0.3)  # the request is at the upstream
                finish = await client.post("/sessions/w/finish", json={"reward": 1.0})
            finally:
                standin.delay = 0.0
            assert (await slow).status_code == 200
            assert finish.json()["turns"] == 2
            assert (await turn(client, "w")).status_code == 409

    asyncio.run(run())
    assert turns_in(logs) == {"w": [0, 1]}
    assert rejected(logs, tmp_path / "samples.parquet") == 0


def test_finishing_an_unknown_session_is_a_404_and_writes_nothing(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"

    async def run() -> None:
        async with gateway(standin, logs) as client:
            answer = await client.post("/sessions/nobody/finish", json={"reward": 1.0})
            assert answer.status_code == 404 and "nobody" in answer.json()["error"]["message"]
            assert (await client.get("/sessions/nobody")).status_code == 404

    asyncio.run(run())
    assert sorted(p.name for p in logs.iterdir()) == []


def test_a_removed_log_folder_is_a_503_and_healthz_fails(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    config = ServeConfig(logs=logs, upstream=standin.url, upstream_api="chat", tokenizer=QWEN3_NAME)
    app = create_app(config)

    async def run() -> None:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=30) as client:
                assert (await turn(client, "r")).status_code == 200
                shutil.rmtree(logs)
                refused = await turn(client, "r")
                assert refused.status_code == 503, refused.text
                assert "cannot be written" in refused.json()["error"]["message"]
                health = await client.get("/healthz")
                assert health.status_code == 503 and "cannot be written" in health.json()["reason"]
                # Anthropic clients get it in their own shape.
                body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
                answer = await client.post("/v1/messages", json=body, headers={"x-api-key": "r2"})
                assert answer.status_code == 503 and answer.json()["type"] == "error"

    asyncio.run(run())
    recorder = recorder_of(app)  # (the app outlives its lifespan)
    assert recorder.unwritten is not None and "could not be written" in recorder.unwritten




def test_a_turn_the_log_cannot_hold_is_refused_before_it_is_journaled(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, tokenizer=None, flush_every=10.0)
    recorder.open()
    good = RecordedTurn("s", [1, 2], [3], [-0.5], "stop", [{"role": "user", "content": "x"}], {"role": "assistant"})
    bad = RecordedTurn("s", [1, -2], [3], [-0.5], "stop", [{"role": "user", "content": "x"}], {"role": "assistant"})

    async def run() -> None:
        assert await recorder.record("s", good) == 0
        with pytest.raises(UpstreamError, match="prompt_ids") as refused:
            await recorder.record("s", bad)
        assert refused.value.status == 502
        assert await recorder.record("s", good) == 1  # no seq was used up
        with pytest.raises(ClientError) as unknown:
            await recorder.finish("never", 1.0, {})
        assert unknown.value.status == 404
        await recorder.close()

    asyncio.run(run())
    assert turns_in(tmp_path) == {"s": [0, 1]}
    assert journal_files(tmp_path) == []


def _write_turns_file(journal: Journal, folder: Path, name: str) -> None:
    """Write the journal's current segment's turns as the writer ``name``'s turns file, as a flush does."""
    writer = TurnLogWriter(folder, name=name, max_age=None)
    for row in decode_journal(journal.current.path).turns:
        writer.record_turn(
            row["session_id"], row["prompt_ids"], row["output_ids"], row["output_logprobs"], "stop",
            row["prompt_messages"], row["response_message"], seq=row["seq"],
        )
    writer.write_rows(*writer.take_buffer(), 1)
    writer.close()


def _rows(count: int) -> list[dict[str, Any]]:
    rows = []
    for seq in range(count):
        checked = turn_row(
            "t", [1, 2, 3 + seq], [7, 8], [-0.25, -0.5], "stop", [{"role": "user", "content": f"q{seq}"}], {}
        )
        checked.row["seq"] = seq
        checked.row["timestamp"] = None
        rows.append(checked.row)
    return rows


def test_a_torn_journal_tail_is_dropped_and_the_rest_adopted(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "dead-0001", tokenizer=QWEN3_NAME)
    for row in _rows(3):
        journal.append(encode_turn(row))
    path = journal.current.path
    whole = path.stat().st_size
    with open(path, "ab") as handle:  # a fourth record cut short by a kill
        payload = encode_turn(_rows(4)[3])
        handle.write((len(payload)).to_bytes(4, "little") + b"\0\0\0\0" + payload[:20])
    os.close(journal.current.fd)
    contents = decode_journal(path)
    assert [row["seq"] for row in contents.turns] == [0, 1, 2]
    assert contents.dropped == path.stat().st_size - whole
    assert np.array_equal(contents.turns[2]["prompt_ids"], [1, 2, 5])

    recorder = Recorder(tmp_path, tokenizer=QWEN3_NAME, flush_every=10.0)
    recorder.open()
    assert recorder.known.next_seq == {"t": 3}
    asyncio.run(recorder.close())
    assert turns_in(tmp_path) == {"t": [0, 1, 2]}
    assert journal_files(tmp_path) == []


def test_a_crash_between_a_files_rename_and_its_segments_removal_writes_nothing_twice(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "dead-0002", tokenizer=None)
    rows = _rows(2)
    for row in rows:
        journal.append(encode_turn(row))
    finish = {"session_id": "t", "reward": 1.0, "index": None, "group_index": None, "label": None}
    journal.append(encode_finish({**finish, "metadata": None, "rollout_id": None}))
    os.close(journal.current.fd)
    # The turns file of segment 1 was renamed into place, then the gateway died before the sessions file.
    _write_turns_file(journal, tmp_path, "dead-0002")

    recorder = Recorder(tmp_path, tokenizer=None, flush_every=10.0)
    recorder.open()
    asyncio.run(recorder.close())
    assert sorted(p.name for p in tmp_path.glob("*.parquet")) == [
        "sessions-dead-0002-000001.parquet",
        "turns-dead-0002-000001.parquet",
    ]
    assert turns_in(tmp_path) == {"t": [0, 1]}
    assert "t" in recorder.known.finished


def test_stale_temporaries_of_a_killed_writer_are_swept(tmp_path: Path) -> None:
    stale = tmp_path / ".turns-123-abcd1234-0123456789ab.tmp"
    stale.write_bytes(b"PAR1")
    other = tmp_path / ".notes.tmp"
    other.write_bytes(b"")
    recorder = Recorder(tmp_path, tokenizer=None, flush_every=10.0)
    recorder.open()
    asyncio.run(recorder.close())
    assert not stale.exists() and other.exists()


def test_the_fsync_option_and_a_finish_record_round_trip(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "fs-0001", tokenizer="tok", fsync=True)
    journal.append(encode_finish({"session_id": "x", "reward": None, "metadata": json.dumps({"k": 1})}))
    contents = decode_journal(journal.current.path)
    assert contents.tokenizer == "tok"
    assert contents.finishes == [{"session_id": "x", "reward": None, "metadata": '{"k": 1}'}]
    journal.close()


def test_readers_see_every_acknowledged_turn_of_a_live_gateway(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"

    async def run() -> None:
        async with gateway(standin, logs) as client:
            with pytest.raises(Exception, match="has not recorded a turn yet"):
                TurnLog.open([logs])
            for sid in ("live-a", "live-a", "live-b"):
                assert (await turn(client, sid)).status_code == 200
            assert (await client.post("/sessions/live-b/finish", json={"reward": 1.0})).status_code == 200
            assert not list(logs.glob("*.parquet"))  # nothing flushed yet (--flush-every 10)
            assert turns_in(logs) == {"live-a": [0, 1], "live-b": [0]}
            summary = rebuild([logs], tmp_path / "live.parquet", workers=1)
            assert summary is not None and summary.rejected == [] and summary.sessions_without_row == 1

    asyncio.run(run())
    assert turns_in(logs) == {"live-a": [0, 1], "live-b": [0]}  # once each, now from the Parquet files


def test_a_segment_whose_files_are_in_place_is_not_read_twice(tmp_path: Path) -> None:
    journal = Journal(tmp_path, "live-0003", tokenizer=None)
    for row in _rows(2):
        journal.append(encode_turn(row))
    _write_turns_file(journal, tmp_path, "live-0003")
    assert turns_in(tmp_path) == {"t": [0, 1]}  # the journal is still there, its rows read once
    journal.close()


def test_forgotten_summaries_never_restart_a_seq_or_reopen_a_finished_session(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, tokenizer=None, flush_every=10.0, sessions=1)
    recorder.open()
    prompt = [{"role": "user", "content": "x"}]

    def one(sid: str) -> RecordedTurn:
        return RecordedTurn(sid, [1, 2], [3], [-0.5], "stop", prompt, {"role": "assistant"})

    async def run() -> None:
        assert await recorder.record("a", one("a")) == 0
        assert await recorder.record("b", one("b")) == 0  # a's summary is forgotten (one kept)
        report = recorder.report("a")
        assert report is not None and report["turns"] == [] and report["recorded"] == 1
        assert await recorder.record("a", one("a")) == 1
        assert await recorder.record("b", one("b")) == 1
        assert await recorder.finish("a", 1.0, {}) == 2
        assert await recorder.record("b", one("b")) == 2  # a's summary forgotten again, its finish is not
        recorder.begin("b")
        recorder.end("b")
        with pytest.raises(ClientError) as finished:
            recorder.begin("a")
        assert finished.value.status == 409
        await recorder.close()

    asyncio.run(run())
    assert turns_in(tmp_path) == {"a": [0, 1], "b": [0, 1, 2]}


@pytest.mark.parametrize("history", ["render", "canonical"])
def test_n_plus_k_sessions_leave_at_most_n_in_every_per_session_store(
    standin: StandIn, tmp_path: Path, history: str
) -> None:
    limit, more = 3, 4
    logs = tmp_path / "logs"
    config = ServeConfig(
        logs=logs, upstream=standin.url, tokenizer=QWEN3_NAME, history=history, live_sessions=limit
    )  # (a generate upstream: it holds each session's history or prompt pieces)
    gateway = Gateway(config)

    async def two_turns(client: httpx.AsyncClient, sid: str) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"hello from {sid}"}]
        for text in ("go on", "and on"):
            answer = await client.post("/v1/chat/completions", json={"messages": messages}, headers={"x-api-key": sid})
            assert answer.status_code == 200, answer.text
            messages += [answer.json()["choices"][0]["message"], {"role": "user", "content": text}]

    def stores() -> dict[str, int]:
        recorder, upstream = gateway.recorder, gateway.upstream
        assert recorder.writer is not None and upstream is not None
        kept = upstream.history() if history == "canonical" else upstream.template().pieces  # type: ignore[attr-defined]
        held = kept.held_sessions
        return {
            "registry": len(recorder.sessions),
            "summaries (GET /sessions/{id})": len(recorder._summaries),
            "the writer's next seq": len(recorder.writer._next_seq),
            "call kinds": len(gateway.call_kinds),
            f"{history} history": held,
        }

    async def run() -> None:
        async with gateway.app.router.lifespan_context(gateway.app):
            transport = httpx.ASGITransport(app=gateway.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1", timeout=30) as client:
                for n in range(limit + more):
                    await two_turns(client, f"s{n}")
                    assert all(0 < count <= limit for count in stores().values()), stores()
                assert stores() == dict.fromkeys(stores(), limit)
                kept = await client.get(f"/sessions/s{limit + more - 1}")
                assert [turn["seq"] for turn in kept.json()["turns"]] == [0, 1]
                # A forgotten session lost only what sped it up: its next turn continues its seq.
                forgotten = await client.get("/sessions/s0")
                assert forgotten.json()["turns"] == [] and forgotten.json()["recorded"] == 2
                await two_turns(client, "s0")
                assert [turn["seq"] for turn in (await client.get("/sessions/s0")).json()["turns"]] == [2, 3]
                assert stores() == dict.fromkeys(stores(), limit)

    asyncio.run(run())
    assert turns_in(logs) == {f"s{n}": ([0, 1, 2, 3] if n == 0 else [0, 1]) for n in range(limit + more)}
    assert rejected(logs, tmp_path / "samples.parquet") == 0


def test_the_writers_value_path_records_what_record_turn_records(tmp_path: Path) -> None:
    from datetime import datetime, timezone

    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    args = ("v", [5, 6, 7], [8, 9], [-0.5, -0.25], "stop", [{"role": "user", "content": "q"}], {"role": "assistant"})
    for name, format in (("one", 1), ("two", 2)):
        with TurnLogWriter(tmp_path / name, format=format, name="w", max_age=None) as log:
            assert log.record_turn(*args, None, {"k": 1}, timestamp=stamp) == 0
            assert log.record(RecordedTurn(*args, None, {"k": 1}), timestamp=stamp) == 1
    for name in ("one", "two"):
        turns = parse_session(next(iter(TurnLog.open([tmp_path / name]).iter_sessions())))
        first, second = ((t.prompt_ids.tolist(), t.metadata, t.output_logprobs.tolist()) for t in turns)
        assert first == second


def test_the_journal_benchmark_runs() -> None:
    import subprocess
    import sys

    from tests.support.helpers import REPO

    done = subprocess.run(
        [sys.executable, "benchmarks/journal.py", "--turns", "2"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    rows = done.stdout.strip().splitlines()[1:]
    assert len(rows) == 4 and all(float(row.split()[-1]) > 0 for row in rows)


def test_a_text_cell_beyond_the_known_ones_survives_the_journal(tmp_path: Path) -> None:
    row = _rows(1)[0]
    row["call_kind"] = "agent"  # a column a later schema adds (provenance), as a text cell
    journal = Journal(tmp_path, "cells-0001", tokenizer=None)
    journal.append(encode_turn(row))
    (back,) = decode_journal(journal.current.path).turns
    assert back["call_kind"] == "agent" and back["prompt_messages"] == row["prompt_messages"]
    journal.close()
