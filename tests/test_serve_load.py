"""64 sessions × 20 turns at once through one ``tito serve``: no turn lost, duplicated or out of order.

The real ``openai`` SDK's async client drives every session (its own ``/sessions/{sid}/v1`` base URL,
retries off, so a failed turn is a failure and never a silent repeat); each session's turns go one after
the other, as an agent's do, and all sessions run together. Turns are tiny so the run stays short: the
test is about ordering and bookkeeping under concurrency, not throughput (``benchmarks/serve.py``).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from .serve_checks import assert_turns_are_the_ledger, raw_seqs_by_session, turns_by_session
from .serve_helpers import Gateway, need_extras
from .serve_standin import StandIn

SESSIONS = 64
TURNS = 20
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


@pytest.mark.parametrize("upstream_api", ["chat", "generate"])
def test_64_sessions_of_20_turns_lose_nothing(tmp_path: Path, upstream_api: str) -> None:
    need_extras("starlette", "uvicorn", "httpx", "openai")
    logs = tmp_path / "logs"
    sids = [f"load-{i:02d}" for i in range(SESSIONS)]
    standin = StandIn(script)
    # 64 connections arrive at once: a listen backlog of 5 (http.server's default) resets some of them.
    standin.server.socket.listen(256)
    with standin, Gateway(standin.url, logs, api=upstream_api) as gateway:
        answers = asyncio.run(asyncio.wait_for(drive(gateway.url, sids), timeout=300))
        ledger = list(standin.ledger)
    # Every client got its own answers, in order.
    assert answers == [[f"Answer {k} for {sid}." for k in range(TURNS)] for sid in sids]
    assert len(ledger) == SESSIONS * TURNS
    # Every row of the log, as written (duplicates would show here, before validation merges nothing).
    assert raw_seqs_by_session(logs) == {sid: list(range(TURNS)) for sid in sids}
    turns = turns_by_session(logs)
    every = [t for sid in sids for t in turns[sid]]
    assert_turns_are_the_ledger(every, ledger)
    for sid in sids:
        # seq order is request order: turn k's prompt ends with the k-th question of this session.
        asked = [ASK.fullmatch(t.prompt_messages[-1]["content"]) for t in turns[sid]]
        assert [(m.group(1), m.group(2)) if m else None for m in asked] == [(str(k), sid) for k in range(TURNS)]
        assert [(t.response_message or {}).get("content") for t in turns[sid]] == [
            f"Answer {k} for {sid}." for k in range(TURNS)
        ]
