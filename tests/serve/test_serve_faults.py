"""tito serve under faults: upstream errors, timeouts, refused connections, clients that leave, bad
requests, SIGTERM under load and SIGKILL — each answered in the client's dialect, no turn recorded for
what the client did not get, and the gateway serving on."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve_helpers import Gateway, converse, free_port, need_extras
from tests.support.serve_inprocess import InProcessGateway
from tests.support.serve_standin import StandIn, qwen3_output
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild

need_extras("starlette", "uvicorn", "httpx", "anthropic", "openai")

import anthropic  # noqa: E402
import httpx  # noqa: E402
import openai  # noqa: E402


def reply(conversation: Any) -> str:
    return qwen3_output("Fine.", "Short thought.")


ANTHROPIC_BODY = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
CHAT_BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES_BODY = {"model": "m", "input": "hi", "store": False}
ROUTES = {
    "anthropic": ("/v1/messages", ANTHROPIC_BODY),
    "chat": ("/v1/chat/completions", CHAT_BODY),
    "responses": ("/v1/responses", RESPONSES_BODY),
}


def all_turns(logs: Path) -> dict[str, list[Any]]:
    """Every session's turns in the log (empty when no file was written)."""
    if not list(logs.glob("*.parquet")):
        return {}
    log = TurnLog.open([logs])
    return {rows.session_id: parse_session(rows) for rows in log.iter_sessions()}


def check_error_shape(wire: str, answer: httpx.Response, status: int) -> str:
    """The answer is ``status`` with the dialect's error body; returns its message."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    if wire == "anthropic":
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
        return str(body["error"]["message"])
    assert set(body["error"]) == {"message", "type", "param", "code"}
    return str(body["error"]["message"])


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(reply) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(standin: StandIn, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessGateway]:
    logs = tmp_path_factory.mktemp("fault-logs")
    settings = {"upstream_timeout": 2.0, "max_request_bytes": 200000, "flush_every": 0.2}
    settings |= {"max_tokens_cap": 64, "upstream_keepalive": 1.0}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TITO_SERVE_DEBUG_METRICS", "1")  # GET /debug/metrics counts the idle trims
        gateway = InProcessGateway(standin.url, logs, **settings)
        gateway.__enter__()
    try:
        yield gateway
    finally:
        gateway.__exit__(None, None, None)


def test_the_upstreams_own_status_reaches_the_client(gateway: InProcessGateway, standin: StandIn) -> None:
    standin.fail_next("status", code=400)
    answer = httpx.post(
        gateway.url + "/v1/messages", json=ANTHROPIC_BODY, headers={"x-api-key": "upstream-400"}, timeout=60
    )
    assert "stand-in fault" in check_error_shape("anthropic", answer, 400)
    assert httpx.get(f"{gateway.url}/sessions/upstream-400", timeout=60).status_code == 404


def test_max_tokens_are_capped(gateway: InProcessGateway, standin: StandIn) -> None:
    body = {**ANTHROPIC_BODY, "max_tokens": 64000}
    assert httpx.post(
        gateway.url + "/v1/messages", json=body, headers={"x-api-key": "capped"}, timeout=60
    ).status_code == 200
    assert standin.ledger[-1]["body"]["sampling_params"]["max_new_tokens"] == 64
    body = {**ANTHROPIC_BODY, "max_tokens": 10}
    assert httpx.post(
        gateway.url + "/v1/messages", json=body, headers={"x-api-key": "capped"}, timeout=60
    ).status_code == 200
    assert standin.ledger[-1]["body"]["sampling_params"]["max_new_tokens"] == 10


@pytest.mark.parametrize("wire", ["anthropic", "chat", "responses"])
@pytest.mark.parametrize("fault", ["status", "hang", "close"])
def test_upstream_failures_reach_the_client_in_its_dialect_and_record_nothing(
    gateway: InProcessGateway, standin: StandIn, wire: str, fault: str
) -> None:
    session = f"fault-{fault}-{wire}"
    path, body = ROUTES[wire]
    standin.fail_next(fault, code=503, seconds=5)
    answer = httpx.post(gateway.url + path, json=body, headers={"authorization": f"Bearer {session}"}, timeout=30)
    status = {"status": 503, "hang": 504, "close": 502}[fault]
    message = check_error_shape(wire, answer, status)
    assert "upstream" in message
    # The gateway serves on: the same session's next request is answered and recorded alone.
    again = httpx.post(gateway.url + path, json=body, headers={"authorization": f"Bearer {session}"}, timeout=30)
    assert again.status_code == 200, again.text
    report = httpx.get(f"{gateway.url}/sessions/{session}", timeout=60).json()
    assert len(report["turns"]) == 1


def test_the_sdks_raise_their_own_errors(gateway: InProcessGateway, standin: StandIn) -> None:
    standin.fail_next("status", code=503, count=2)
    client = anthropic.Anthropic(base_url=gateway.url, auth_token="sdk-errors", max_retries=0)
    with client, pytest.raises(anthropic.InternalServerError) as raised:
        client.messages.create(**ANTHROPIC_BODY)  # type: ignore[arg-type]
    assert raised.value.status_code == 503 and raised.value.body["error"]["type"] == "api_error"  # type: ignore[index]
    oclient = openai.OpenAI(base_url=gateway.url + "/v1", api_key="sdk-errors", max_retries=0)
    with oclient, pytest.raises(openai.InternalServerError) as oraised:
        oclient.chat.completions.create(**CHAT_BODY)  # type: ignore[arg-type]
    assert oraised.value.status_code == 503
    assert httpx.get(f"{gateway.url}/sessions/sdk-errors", timeout=60).status_code == 404


def test_a_refused_upstream_is_a_502(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    with InProcessGateway(f"http://127.0.0.1:{port}", tmp_path / "logs") as gw:
        for wire, (path, body) in ROUTES.items():
            answer = httpx.post(gw.url + path, json=body, headers={"x-api-key": "refused"}, timeout=30)
            assert "could not be reached" in check_error_shape(wire, answer, 502)
    assert all_turns(tmp_path / "logs") == {}


def test_idle_upstream_connections_are_dropped_before_the_upstream_drops_them(
    gateway: InProcessGateway, standin: StandIn, tmp_path: Path
) -> None:
    # vLLM and SGLang (uvicorn) close a connection idle for 5 s; reusing one as it closes loses the request.
    import uvicorn

    from tito_cli.serve import ServeConfig

    keepalive = ServeConfig(logs=tmp_path, upstream="http://127.0.0.1:9").upstream_keepalive
    assert keepalive < uvicorn.Config(app=None).timeout_keep_alive
    first = len(standin.peers)

    def ask() -> None:
        answer = httpx.post(gateway.url + "/v1/chat/completions", json=CHAT_BODY, headers={"x-api-key": "idle"},
                            timeout=60)
        assert answer.status_code == 200, answer.text

    ask()
    ask()  # at once: the pooled connection is reused
    time.sleep(2.5)
    ask()  # idle past --upstream-keepalive 1: a new connection
    ports = standin.peers[first:]
    assert len(ports) == 3 and ports[0] == ports[1] and ports[2] != ports[1]


@pytest.mark.slow
def test_freed_memory_goes_back_once_the_gateway_is_idle(gateway: InProcessGateway, standin: StandIn) -> None:
    # Never while a request is in flight or a turn is being recorded; once, after a second of idleness.
    def trims() -> int:
        return int(httpx.get(gateway.url + "/debug/metrics", timeout=30).json()["idle_trims"])

    time.sleep(1.5)  # earlier tests' quiet spell has had its trim
    base = trims()
    standin.delay = 2.5
    try:
        slow = threading.Thread(
            target=httpx.post,
            args=(gateway.url + "/v1/chat/completions",),
            kwargs={"json": CHAT_BODY, "headers": {"x-api-key": "idle-trim"}, "timeout": 60},
        )
        slow.start()
        time.sleep(2.0)  # the request waits on the upstream: busy, never trimmed
        assert trims() == base
        slow.join()
    finally:
        standin.delay = 0.0
    deadline = time.monotonic() + 20
    while trims() == base and time.monotonic() < deadline:
        time.sleep(0.1)
    assert trims() == base + 1
    time.sleep(1.5)
    assert trims() == base + 1  # idle stays idle: one trim per quiet spell


def test_a_client_that_leaves_before_its_answer_gets_no_turn(gateway: InProcessGateway, standin: StandIn) -> None:
    standin.fail_next("slow", seconds=1.5)
    first = len(standin.ledger)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.url + "/v1/chat/completions", json=CHAT_BODY, headers={"x-api-key": "leaver"}, timeout=0.5)
    time.sleep(2.0)  # the stand-in answered the (abandoned) call meanwhile
    assert len(standin.ledger) == first + 1
    # Served on, and the abandoned call left nothing in the session.
    answer = httpx.post(
        gateway.url + "/v1/chat/completions", json=CHAT_BODY, headers={"x-api-key": "leaver"}, timeout=60
    )
    assert answer.status_code == 200
    report = httpx.get(f"{gateway.url}/sessions/leaver", timeout=60).json()
    assert [t["seq"] for t in report["turns"]] == [0]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and "leaver" not in all_turns(gateway.logs):
        time.sleep(0.1)
    (turn,) = all_turns(gateway.logs)["leaver"]
    assert turn.prompt_ids.tolist() == standin.ledger[-1]["prompt_ids"]


@pytest.mark.parametrize("wire", ["anthropic", "chat", "responses"])
def test_bad_requests_get_a_4xx_in_the_dialect(gateway: InProcessGateway, wire: str) -> None:
    path, body = ROUTES[wire]
    headers = {"authorization": f"Bearer bad-{wire}", "content-type": "application/json"}
    url = gateway.url + path
    malformed = httpx.post(url, content=b'{"model": "m", "messages": [', headers=headers, timeout=60)
    assert "not JSON" in check_error_shape(wire, malformed, 400)
    unknown = {
        "anthropic": {**ANTHROPIC_BODY, "messages": [{"role": "user", "content": [{"type": "hologram", "data": "x"}]}]},
        "chat": {**CHAT_BODY, "messages": [{"role": "user", "content": [{"type": "hologram"}]}]},
        "responses": {**RESPONSES_BODY, "input": [{"type": "hologram_call", "id": "x"}]},
    }[wire]
    assert "hologram" in check_error_shape(wire, httpx.post(url, json=unknown, headers=headers, timeout=60), 400)
    not_an_object = httpx.post(url, json=[1, 2], headers=headers, timeout=60)
    assert "request body" in check_error_shape(wire, not_an_object, 400)
    huge = {**body, "padding": "x" * 600_000}
    assert "larger than" in check_error_shape(wire, httpx.post(url, json=huge, headers=headers, timeout=60), 413)
    fine = httpx.post(url, json=body, headers=headers, timeout=60)
    assert fine.status_code == 200
    assert len(httpx.get(f"{gateway.url}/sessions/bad-{wire}", timeout=60).json()["turns"]) == 1


@pytest.mark.slow  # tito serve as a process: signals, two gateways on one folder
def test_sigterm_under_load_keeps_every_answered_turn(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    answered: dict[str, list[str]] = {f"load-{k}": [] for k in range(8)}
    standin.delay = 0.3
    try:
        with Gateway(standin.url, logs, api="chat") as gw:

            def session(k: int) -> None:
                sid = f"load-{k}"
                converse(gw.url, sid, [{"role": "user", "content": f"task {k}"}], answered[sid], 50)

            threads = [threading.Thread(target=session, args=(k,)) for k in range(8)]
            for thread in threads:
                thread.start()
            time.sleep(2.0)
            assert gw.terminate(signal.SIGTERM) == 0, gw.output()
            for thread in threads:
                thread.join(timeout=60)
    finally:
        standin.delay = 0.0
    recorded = all_turns(logs)
    assert sum(len(v) for v in answered.values()) >= 8
    assert {sid: len(turns) for sid, turns in recorded.items()} == {sid: len(a) for sid, a in answered.items() if a}
    for sid, turns in recorded.items():
        assert [json.loads(json.dumps(t.response_message))["content"] for t in turns] == answered[sid]


@pytest.mark.slow  # tito serve as a process: signals, two gateways on one folder
def test_sigkill_leaves_a_log_that_reads_cleanly(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    with Gateway(standin.url, logs, extra=["--flush-every", "0.2"]) as gw:
        for k in range(6):
            answer = httpx.post(
                gw.url + "/v1/messages", json=ANTHROPIC_BODY, headers={"x-api-key": f"kill-{k}"}, timeout=60
            )
            assert answer.status_code == 200
        time.sleep(1.0)  # flushed by now
        for k in range(6, 12):
            httpx.post(gw.url + "/v1/messages", json=ANTHROPIC_BODY, headers={"x-api-key": f"kill-{k}"}, timeout=60)
        gw.terminate(signal.SIGKILL)
    recorded = all_turns(logs)
    assert {f"kill-{k}" for k in range(6)} <= set(recorded) <= {f"kill-{k}" for k in range(12)}
    summary = rebuild([logs], tmp_path / "samples.parquet", workers=1)
    assert summary is not None and (tmp_path / "samples.parquet").exists()


@pytest.mark.slow  # tito serve as a process: signals, two gateways on one folder
def test_two_gateways_write_one_log_folder(standin: StandIn, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    first = len(standin.ledger)
    one = Gateway(standin.url, logs, extra=["--parser", "qwen3"])
    two = Gateway(standin.url, logs, api="chat")
    with contextlib.ExitStack() as running:
        for gw in (one, two):  # both start at once: their start-ups overlap
            gw.start()
            running.callback(gw.__exit__, None, None, None)
        one.ready()
        two.ready()
        for k in range(3):
            for gw, name in ((one, "one"), (two, "two")):
                answer = httpx.post(
                    gw.url + "/v1/responses", json=RESPONSES_BODY, headers={"x-api-key": f"{name}-{k}"}, timeout=60
                )
                assert answer.status_code == 200
    recorded = all_turns(logs)
    assert sorted(recorded) == sorted(f"{name}-{k}" for name in ("one", "two") for k in range(3))
    assert len({p.name for p in logs.glob("*.parquet")}) >= 2
    prompts = sorted(t.prompt_ids.tolist() for turns in recorded.values() for t in turns)
    assert prompts == sorted(e["prompt_ids"] for e in standin.ledger[first:])
