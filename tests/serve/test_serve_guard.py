"""tito serve refuses what it cannot record and what a web page sends, and keeps slow or hostile peers bounded.

In-process (the app and its lifespan under ``httpx.ASGITransport``, the stand-in upstream on a port)
where the HTTP server does not matter; a ``tito serve`` subprocess for the connection limits.
Each test fails on a gateway without the check it names (docs/reliability.md, ``tito serve``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve_helpers import Gateway as GatewayProcess
from tests.support.serve_helpers import need_extras
from tests.support.serve_standin import QWEN3, StandIn, qwen3_output

need_extras("starlette", "uvicorn", "httpx")

import httpx  # noqa: E402

from tito_cli.serve.app import Gateway  # noqa: E402
from tito_cli.serve.config import ServeConfig  # noqa: E402
from tito_cli.serve.dialects import DIALECTS  # noqa: E402
from tito_cli.serve.dialects.chat import ChatCompletions  # noqa: E402
from tito_cli.serve.template import ChatTemplate  # noqa: E402
from tito_cli.serve.upstreams import UPSTREAMS  # noqa: E402
from tito_cli.serve.upstreams.base import Upstream  # noqa: E402

PORT = 8431
BASE = f"http://127.0.0.1:{PORT}"
ANTHROPIC = "/v1/messages"
CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"


def anthropic_body(content: Any = "hi", **more: Any) -> dict[str, Any]:
    return {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": content}], **more}


def chat_body(content: Any = "hi", **more: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": content}], **more}


def reply(conversation: Any) -> str:
    return qwen3_output("Fine.", "Short thought.")


@pytest.fixture(scope="module")
def standin() -> Iterator[StandIn]:
    with StandIn(reply) as server:
        yield server


@pytest.fixture(scope="module")
def template() -> ChatTemplate:
    return ChatTemplate(str(QWEN3))


def config_for(standin: StandIn, logs: Path, **more: Any) -> ServeConfig:
    settings: dict[str, Any] = {"port": PORT, "flush_every": 0.2, "upstream_timeout": 5.0, "workers": 2}
    settings.update({"tokenizer": str(QWEN3), **more})
    return ServeConfig(logs=logs, upstream=standin.url, **settings)


@contextlib.asynccontextmanager
async def serving(
    config: ServeConfig, template: ChatTemplate | None
) -> AsyncIterator[tuple[Gateway, httpx.AsyncClient]]:
    """The gateway in this process, its lifespan running, and a client speaking to it over ASGI."""
    gateway = Gateway(config, template)
    async with gateway.app.router.lifespan_context(gateway.app):
        transport = httpx.ASGITransport(app=gateway.app)
        async with httpx.AsyncClient(transport=transport, base_url=BASE, timeout=30) as client:
            yield gateway, client


def run(
    standin: StandIn,
    template: ChatTemplate | None,
    logs: Path,
    scenario: Callable[[Gateway, httpx.AsyncClient], Any],
    **more: Any,
) -> Any:
    async def main() -> Any:
        async with serving(config_for(standin, logs, **more), template) as (gateway, client):
            return await scenario(gateway, client)

    return asyncio.run(main())


def error_message(answer: httpx.Response, status: int, anthropic: bool = False) -> str:
    assert answer.status_code == status, answer.text
    body = answer.json()
    if anthropic:
        assert body["type"] == "error" and set(body["error"]) == {"type", "message"}
    else:
        assert set(body["error"]) == {"message", "type", "param", "code"}
    return str(body["error"]["message"])


# -- impossible upstream answers -------------------------------------------------------------------


def _pairs(answer: dict[str, Any]) -> list[list[Any]]:
    return answer["meta_info"]["output_token_logprobs"]  # type: ignore[no-any-return]


def _set_id(value: Any, position: int = 1) -> Callable[[dict[str, Any]], None]:
    def rewrite(answer: dict[str, Any]) -> None:
        _pairs(answer)[position][1] = value

    return rewrite


def _set_logprob(value: Any, position: int = 1) -> Callable[[dict[str, Any]], None]:
    def rewrite(answer: dict[str, Any]) -> None:
        _pairs(answer)[position][0] = value

    return rewrite


GENERATE_FAULTS = {
    "negative id": (_set_id(-3, 5), "token id -3 at output position 5"),
    "id beyond int32": (_set_id(2**31), f"token id {2**31} at output position 1"),
    "id beyond the vocabulary": (_set_id(151_700), "token id 151700 at output position 1: beyond the tokenizer"),
    "float id": (_set_id(3.0), "token id 3.0 at output position 1: not an integer"),
    "string id": (_set_id("7"), 'token id "7" at output position 1: not an integer'),
    "boolean id": (_set_id(True), "token id true at output position 1: not an integer"),
    "NaN logprob": (_set_logprob(math.nan), "logprob nan at output position 1"),
    "-Infinity logprob": (_set_logprob(-math.inf), "logprob -inf at output position 1"),
    "null logprob": (_set_logprob(None), "logprob null at output position 1: not a number"),
    "positive logprob": (_set_logprob(0.5), "logprob 0.5 at output position 1"),
    "boolean logprob": (_set_logprob(False), "logprob false at output position 1: not a number"),
    "string logprob": (_set_logprob("-1"), 'logprob "-1" at output position 1: not a number'),
}


@pytest.mark.parametrize("fault", sorted(GENERATE_FAULTS))
@pytest.mark.parametrize("history", ["render", "canonical"])
def test_impossible_generate_answers_are_502_and_nothing_is_recorded_or_held(
    standin: StandIn, template: ChatTemplate, tmp_path: Path, fault: str, history: str
) -> None:
    rewrite, expected = GENERATE_FAULTS[fault]

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        standin.tamper_next(rewrite)
        answer = await client.post(ANTHROPIC, json=anthropic_body(), headers={"x-api-key": "bad-answer"})
        assert expected in error_message(answer, 502, anthropic=True)
        assert (await client.get("/sessions/bad-answer")).status_code == 404
        if history == "canonical":
            assert gateway.upstream is not None
            assert gateway.upstream.history().held_sessions == 0  # type: ignore[attr-defined]
        again = await client.post(ANTHROPIC, json=anthropic_body(), headers={"x-api-key": "bad-answer"})
        assert again.status_code == 200, again.text
        turns = (await client.get("/sessions/bad-answer")).json()["turns"]
        assert [turn["seq"] for turn in turns] == [0]

    run(standin, template, tmp_path, scenario, history=history)


CHAT_FAULTS: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {
    "negative output id": (
        lambda a: a["choices"][0]["token_ids"].__setitem__(2, -1),
        "token id -1 at output position 2",
    ),
    "boolean prompt id": (
        lambda a: a["prompt_token_ids"].__setitem__(0, True),
        "token id true at prompt position 0",
    ),
    "NaN logprob": (
        lambda a: a["choices"][0]["logprobs"]["content"][0].__setitem__("logprob", math.nan),
        "logprob nan at output position 0",
    ),
    "fewer logprobs than ids": (
        lambda a: a["choices"][0]["logprobs"]["content"].pop(),
        "output token ids but",
    ),
    "message is a string": (
        lambda a: a["choices"][0].__setitem__("message", "hello"),
        "choices[0].message is a string, not an object",
    ),
    "tool_calls is an object": (
        lambda a: a["choices"][0]["message"].__setitem__("tool_calls", {"0": 1}),
        "tool_calls is a object",
    ),
}


@pytest.mark.parametrize("fault", sorted(CHAT_FAULTS))
def test_impossible_chat_answers_are_502(standin: StandIn, template: ChatTemplate, tmp_path: Path, fault: str) -> None:
    rewrite, expected = CHAT_FAULTS[fault]

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        standin.tamper_next(rewrite)
        answer = await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer bad-chat"})
        assert expected in error_message(answer, 502)
        assert (await client.get("/sessions/bad-chat")).status_code == 404

    run(standin, template, tmp_path, scenario, upstream_api="chat")


def test_a_generate_reply_is_what_its_ids_say(standin: StandIn, template: ChatTemplate, tmp_path: Path) -> None:
    def lie(answer: dict[str, Any]) -> None:
        answer["text"] = "<think>\nSomething else.\n</think>\n\nNot what the ids say."

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        standin.tamper_next(lie)
        answer = await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer ids"})
        assert answer.status_code == 200, answer.text
        message = answer.json()["choices"][0]["message"]
        assert message["content"] == "Fine."
        assert standin.decode(standin.ledger[-1]["output_ids"]).startswith("<think>\nShort thought.")

    run(standin, template, tmp_path, scenario)


def test_more_output_ids_than_max_new_tokens_is_a_502(standin: StandIn, template: ChatTemplate, tmp_path: Path) -> None:
    def flood(answer: dict[str, Any]) -> None:
        pairs = _pairs(answer)
        pairs.extend([[-0.5, 13, None]] * 100)

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        standin.tamper_next(flood)
        body = anthropic_body(max_tokens=16)
        answer = await client.post(ANTHROPIC, json=body, headers={"x-api-key": "flood"})
        assert "for max_new_tokens 16" in error_message(answer, 502, anthropic=True)

    run(standin, template, tmp_path, scenario)


# -- client bodies the log cannot hold -------------------------------------------------------------

TOOL = {"name": "run", "description": "Run a command.", "input_schema": {"type": "object", "properties": {}}}


def _deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


def _with_tool_use(arguments_text: str) -> bytes:
    """An Anthropic body replaying a tool call whose input is ``arguments_text`` (raw JSON, maybe not JSON)."""
    head = json.dumps(
        {
            "model": "m",
            "max_tokens": 64,
            "tools": [TOOL],
            "messages": [
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "run", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            ],
        }
    )
    return head.replace('"input": {}', f'"input": {arguments_text}').encode()


CLIENT_FAULTS = {
    "NaN in a tool input": (_with_tool_use('{"x": NaN}'), "NaN is not JSON"),
    "Infinity in a tool spec": (
        json.dumps(anthropic_body(tools=[{**TOOL, "input_schema": {"type": "object", "maximum": 1}}]))
        .replace('"maximum": 1', '"maximum": Infinity')
        .encode(),
        "Infinity is not JSON",
    ),
    "lone surrogate in content": (json.dumps(anthropic_body("a\ud800b")).encode(), "messages[0].content"),
    "lone surrogate in model": (json.dumps({**anthropic_body(), "model": "m\udc00"}).encode(), "model holds a lone"),
    "lone surrogate in a tool name": (
        json.dumps(anthropic_body(tools=[{**TOOL, "name": "r\ud83d"}])).encode(),
        "tools[0].name holds a lone surrogate",
    ),
    "500-deep tool input": (_with_tool_use(json.dumps(_deep(500))), "nested more than"),
    "5000-deep tool input": (_with_tool_use("[" * 5000 + "]" * 5000), "nested"),
    "invalid UTF-8": (
        b'{"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}',
        "UTF-8",
    ),
    "1e400 in a tool input": (_with_tool_use('{"x": 1e400}'), "beyond float64"),
}


@pytest.mark.parametrize("fault", sorted(CLIENT_FAULTS))
def test_client_bodies_the_log_cannot_hold_are_400_before_the_upstream(
    standin: StandIn, template: ChatTemplate, tmp_path: Path, fault: str
) -> None:
    body, expected = CLIENT_FAULTS[fault]

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        calls = len(standin.ledger)
        headers = {"x-api-key": "bad-body", "content-type": "application/json"}
        answer = await client.post(ANTHROPIC, content=body, headers=headers)
        assert expected in error_message(answer, 400, anthropic=True)
        assert len(standin.ledger) == calls  # nothing went upstream

    run(standin, template, tmp_path, scenario)


# -- loopback is not a trust boundary --------------------------------------------------------------


def test_foreign_origins_hosts_and_content_types_are_refused(
    standin: StandIn, template: ChatTemplate, tmp_path: Path
) -> None:
    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        calls = len(standin.ledger)
        web = {"x-api-key": "web", "origin": "https://evil.example"}
        answer = await client.post(ANTHROPIC, json=anthropic_body(), headers=web)
        assert "web origin 'https://evil.example'" in error_message(answer, 403, anthropic=True)
        answer = await client.post("/sessions/web/finish", json={"reward": 1}, headers={"origin": "null"})
        assert "--allow-origin" in error_message(answer, 403)
        answer = await client.get("/sessions/web", headers={"host": f"rebound.example:{PORT}"})
        assert "does not name this gateway" in error_message(answer, 403)
        answer = await client.post(
            CHAT, content=json.dumps(chat_body()), headers={"content-type": "text/plain", "authorization": "Bearer w"}
        )
        assert "content type is 'text/plain'" in error_message(answer, 415)
        answer = await client.post("/sessions/web/finish", data={"reward": "1"})
        assert "application/x-www-form-urlencoded" in error_message(answer, 415)
        assert len(standin.ledger) == calls
        # What agents send: no Origin, the gateway's own Host, JSON (with a charset or without one).
        for host in (f"127.0.0.1:{PORT}", f"localhost:{PORT}", f"[::1]:{PORT}"):
            ok = await client.post(
                CHAT,
                content=json.dumps(chat_body()),
                headers={"host": host, "content-type": "application/json; charset=utf-8", "authorization": "Bearer ok"},
            )
            assert ok.status_code == 200, ok.text
        allowed = await client.post(
            CHAT, json=chat_body(), headers={"origin": "https://app.example", "authorization": "Bearer ok"}
        )
        assert allowed.status_code == 200, allowed.text

    run(standin, template, tmp_path, scenario, allow_origins=("https://app.example",))


def test_the_host_check_follows_the_listening_port_and_a_loopback_bind(
    standin: StandIn, template: ChatTemplate, tmp_path: Path
) -> None:
    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> int:
        # Served on 8431 (the ASGI server's port) whatever ServeConfig.port says: a library user's own server.
        ok = await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer port"})
        assert ok.status_code == 200, ok.text
        elsewhere = await client.get("/sessions/port", headers={"host": "127.0.0.1:8000"})
        return elsewhere.status_code

    assert run(standin, template, tmp_path, scenario, port=8000) == 403

    async def cluster(gateway: Gateway, client: httpx.AsyncClient) -> int:
        named = await client.post(
            CHAT, json=chat_body(), headers={"authorization": "Bearer node", "host": f"node-7.cluster:{PORT}"}
        )
        return named.status_code

    assert run(standin, template, tmp_path, cluster, host="0.0.0.0") == 200


# -- no leaks ---------------------------------------------------------------------------------------


class _Failing(Upstream):
    """An upstream plug-in whose every call fails inside the gateway (a bug, not an upstream error)."""

    name = "failing-for-test"
    summary = "raises"

    async def generate(self, request: Any, session_id: str, call_id: Any) -> Any:
        raise RuntimeError("secret detail at /srv/internal/path")


def test_errors_and_listings_do_not_leak_paths_urls_or_exception_texts(
    standin: StandIn, template: ChatTemplate, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}"

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        models = (await client.get("/v1/models")).json()
        assert [m["id"] for m in models["data"]] == ["qwen3"]
        assert str(QWEN3) not in json.dumps(models)
        answer = await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer dead"})
        message = error_message(answer, 502)
        assert "could not be reached" in message and dead not in message and "127.0.0.1" not in message

    with caplog.at_level(logging.WARNING, logger="tito.serve"):

        async def main() -> None:
            config = replace(config_for(standin, tmp_path), upstream=dead)
            async with serving(config, template) as (gateway, client):
                await scenario(gateway, client)

        asyncio.run(main())
    assert any(dead in record.getMessage() for record in caplog.records)  # the operator sees where

    async def no_tokenizer(gateway: Gateway, client: httpx.AsyncClient) -> None:
        answer = await client.post("/v1/messages/count_tokens", json=anthropic_body(), headers={"x-api-key": "n"})
        assert "/srv/secret" not in error_message(answer, 501, anthropic=True)

    run(standin, None, tmp_path, no_tokenizer, upstream_api="chat", tokenizer="/srv/secret/tokenizer")

    UPSTREAMS.register(_Failing)
    try:

        async def failing(gateway: Gateway, client: httpx.AsyncClient) -> None:
            answer = await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer bug"})
            message = error_message(answer, 500)
            assert "secret" not in message and "RuntimeError" not in message

        run(standin, template, tmp_path, failing, upstream_api="failing-for-test")
    finally:
        UPSTREAMS.unregister("failing-for-test")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- slow upstreams, upstream failures logged ------------------------------------------------------


def test_the_upstream_timeout_bounds_the_whole_answer(standin: StandIn, template: ChatTemplate, tmp_path: Path) -> None:
    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> float:
        standin.fail_next("drip", seconds=0.2)  # a byte every 0.2 s: each read is quick, the answer never ends
        started = time.monotonic()
        answer = await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer drip"})
        assert "within 1.5 s (--upstream-timeout)" in error_message(answer, 504)
        return time.monotonic() - started

    elapsed = run(standin, template, tmp_path, scenario, upstream_timeout=1.5)
    assert elapsed < 5.0


def test_upstream_failures_are_logged_one_line_each_rate_limited(
    standin: StandIn, template: ChatTemplate, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        standin.fail_next("status", code=503, count=15)
        for _ in range(15):
            answer = await client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer down"})
            assert answer.status_code == 503

    with caplog.at_level(logging.WARNING, logger="tito.serve"):
        run(standin, template, tmp_path, scenario)
    lines = [r.getMessage() for r in caplog.records if "upstream failure" in r.getMessage()]
    assert len(lines) == 10  # then quiet for the rest of the window
    assert "session 'down': upstream failure (503): the upstream answered 503: stand-in fault" in lines[0]


# -- one huge request cannot starve small ones ------------------------------------------------------


def test_huge_requests_do_not_starve_a_small_one(standin: StandIn, template: ChatTemplate, tmp_path: Path) -> None:
    huge = chat_body("word " * ((2 << 20) // 5))  # about 2 MiB of text, over pools.HEAVY_BYTES

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        assert gateway.pool is not None
        # Every heavy worker busy, as with several huge requests rendering at once (a timing-free stand-in
        # for their seconds of CPU work: four 8 MiB requests once made a small one wait 27 s).
        release = threading.Event()
        busy = [gateway.pool.heavy.submit(release.wait, 60) for _ in range(gateway.pool.heavy_workers)]
        try:
            big = asyncio.create_task(client.post(CHAT, json=huge, headers={"authorization": "Bearer huge"}))
            small = await asyncio.wait_for(
                client.post(CHAT, json=chat_body(), headers={"authorization": "Bearer small"}), 20
            )
            assert small.status_code == 200, small.text
            await asyncio.sleep(0.5)
            assert not big.done()  # the huge one waits for its own pool
        finally:
            release.set()
        answer = await asyncio.wait_for(big, 60)
        assert answer.status_code == 200, answer.text
        assert all(future.result() for future in busy)

    run(standin, template, tmp_path, scenario, workers=2)


# -- slow and idle clients (a real server) ----------------------------------------------------------


@pytest.mark.slow  # tito serve as a process: real sockets against its connection limits
def test_idle_sockets_cannot_hang_the_gateway(standin: StandIn, tmp_path: Path) -> None:
    extra = ["--max-client-connections", "50", "--client-header-timeout", "2", "--flush-every", "0.2"]
    with GatewayProcess(standin.url, tmp_path / "logs", extra=extra) as gateway:
        idle: list[socket.socket] = []
        try:
            for _ in range(200):
                idle.append(socket.create_connection(("127.0.0.1", gateway.port), timeout=5))
            started = time.monotonic()
            answer = httpx.post(
                gateway.url + CHAT, json=chat_body(), headers={"authorization": "Bearer busy"}, timeout=20
            )
            assert answer.status_code == 200, answer.text
            assert time.monotonic() - started < 10
            # A head that never ends is cut at the header deadline.
            slow = socket.create_connection(("127.0.0.1", gateway.port), timeout=10)
            slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            started = time.monotonic()
            assert slow.recv(1024) == b""
            assert time.monotonic() - started < 6
            slow.close()
        finally:
            for sock in idle:
                sock.close()
        output = gateway.output()
    assert "(--max-client-connections 50): closed the one idle longest" in output
    assert output.count("--max-client-connections") <= 3  # one line per 10 s, not one per socket
    assert "Traceback" not in output


class _Echo(ChatCompletions):
    """A dialect plug-in: Chat Completions' body on its own route, with its own marker, listing and errors."""

    name = "echo-for-test"
    summary = "chat completions under another route"
    path = "/v9/echo"
    marker = "x-echo-version"

    def error(self, status: int, message: str) -> dict[str, Any]:
        return {"echo_error": {"status": status, "message": message}}

    def models(self, name: str) -> dict[str, Any]:
        return {"echo_models": [name]}


def test_a_dialect_is_one_class_and_one_table_line_and_owns_its_whole_wire(
    standin: StandIn, template: ChatTemplate, tmp_path: Path
) -> None:
    DIALECTS.register(_Echo)

    async def scenario(gateway: Gateway, client: httpx.AsyncClient) -> None:
        answer = await client.post("/v9/echo", json=chat_body(), headers={"x-api-key": "echo"})
        assert answer.status_code == 200, answer.text
        turns = (await client.get("/sessions/echo")).json()["turns"]
        assert [turn["wire"] for turn in turns] == ["echo-for-test"]
        refused = await client.post("/sessions/echo/v9/echo", json={"messages": []})
        assert refused.status_code == 400 and refused.json()["echo_error"]["status"] == 400
        wrong_method = await client.get("/v9/echo")  # Starlette's 405, worded by the route's dialect
        assert wrong_method.status_code == 405 and "echo_error" in wrong_method.json()
        assert (await client.get("/v1/models", headers={"x-echo-version": "1"})).json() == {"echo_models": ["qwen3"]}
        anthropic = (await client.get("/v1/models", headers={"anthropic-version": "2023-06-01"})).json()
        assert anthropic["data"][0]["type"] == "model" and anthropic["first_id"] == "qwen3"
        assert (await client.get("/v1/models")).json()["object"] == "list"  # the default: OpenAI's
        unknown = await client.get("/v1/nothing-here", headers={"x-echo-version": "1"})
        assert unknown.status_code == 404 and "echo_error" in unknown.json()
        assert "error" in (await client.get("/v1/nothing-here")).json()

    try:
        run(standin, template, tmp_path, scenario)
    finally:
        DIALECTS.unregister("echo-for-test")
