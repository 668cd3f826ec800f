"""64 sessions × 4 turns at once through one ``tito serve``: no turn lost, duplicated or out of order.

The real ``openai`` SDK's async client drives every session (its own ``/sessions/{sid}/v1`` base URL,
retries off, so a failed turn is a failure and never a silent repeat); each session's turns go one after
the other, as an agent's do, and all sessions run together. Turns are tiny so the run stays short: the
test is about ordering and bookkeeping under concurrency, not throughput (``benchmarks/serve.py``).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.serve_checks import assert_turns_are_the_ledger, raw_seqs_by_session, turns_by_session
from tests.support.serve_helpers import need_extras
from tests.support.serve_inprocess import InProcessGateway as Gateway
from tests.support.serve_standin import StandIn

#: 64 sessions at once through one gateway: a load test.
pytestmark = pytest.mark.slow

SESSIONS = 64
#: Enough for an order per session; every turn of every session is in flight beside 63 others.
TURNS = 4
ASK = re.compile(r"turn (\d+) of (load-\d+)")


def script(conversation: Any) -> str:
    """The model answers the last question's turn number and session: a crossed wire shows.

    The conversation is the messages (chat upstream) or the decoded prompt (generate upstream).
    """
    text = conversation if isinstance(conversation, str) else str(conversation[-1]["content"])
    asked = ASK.findall(text)
    assert asked, text[-300:]
    k, sid = asked[-1]
    return f"Answer {k} for {sid}."


async def one_session(base: str, sid: str) -> list[str]:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{base}/sessions/{sid}/v1", api_key="unused", max_retries=0, timeout=60)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Answer briefly."}]
    answers = []
    async with client:
        for k in range(TURNS):
            messages.append({"role": "user", "content": f"turn {k} of {sid}"})
            reply = await client.chat.completions.create(model="qwen3", messages=messages)  # type: ignore[arg-type]
            text = reply.choices[0].message.content or ""
            answers.append(text)
            messages.append({"role": "assistant", "content": text})
    return answers


async def drive(base: str, sids: list[str]) -> list[list[str]]:
    return await asyncio.gather(*(one_session(base, sid) for sid in sids))


@dataclass
class Load:
    sids: list[str]
    answers: list[list[str]]  # what each client got, in order
    ledger: list[dict[str, Any]]  # what the upstream answered
    logs: Path


@pytest.fixture(scope="module", params=["chat", "generate"])
def load(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Load:
    """All sessions at once through one gateway in front of the ``chat`` or ``generate`` upstream."""
    need_extras("starlette", "uvicorn", "httpx", "openai")
    logs = tmp_path_factory.mktemp(f"load-{request.param}") / "logs"
    sids = [f"load-{i:02d}" for i in range(SESSIONS)]
    standin = StandIn(script)
    # 64 connections arrive at once: a listen backlog of 5 (http.server's default) resets some of them.
    standin.server.socket.listen(256)
    with standin, Gateway(standin.url, logs, api=request.param) as gateway:
        answers = asyncio.run(asyncio.wait_for(drive(gateway.url, sids), timeout=300))
        ledger = list(standin.ledger)
    return Load(sids, answers, ledger, logs)


def test_every_client_gets_its_own_answers_in_order(load: Load) -> None:
    assert load.answers == [[f"Answer {k} for {sid}." for k in range(TURNS)] for sid in load.sids]
    assert len(load.ledger) == SESSIONS * TURNS


def test_every_turn_is_written_once(load: Load) -> None:
    # Every row of the log, as written (duplicates would show here, before validation merges nothing).
    assert raw_seqs_by_session(load.logs) == {sid: list(range(TURNS)) for sid in load.sids}


def test_every_turn_is_what_the_upstream_received_and_generated(load: Load) -> None:
    turns = turns_by_session(load.logs)
    assert_turns_are_the_ledger([t for sid in load.sids for t in turns[sid]], load.ledger)


def test_seq_order_is_request_order(load: Load) -> None:
    turns = turns_by_session(load.logs)
    for sid in load.sids:
        # Turn k's prompt ends with the k-th question of this session, and its answer is the k-th answer.
        asked = [ASK.fullmatch(t.prompt_messages[-1]["content"]) for t in turns[sid]]
        assert [(m.group(1), m.group(2)) if m else None for m in asked] == [(str(k), sid) for k in range(TURNS)]
        assert [(t.response_message or {}).get("content") for t in turns[sid]] == [
            f"Answer {k} for {sid}." for k in range(TURNS)
        ]
