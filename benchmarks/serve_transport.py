"""CPU of the gateway's upstream leg alone, for each HTTP client tito serve could use (#38).

One instant upstream (``serve.py --upstream``, its own process) answers ``/v1/chat/completions`` with a
chat answer carrying the prompt's ids; this process POSTs a conversation's body to it ``--requests``
times through one client, ``--concurrency`` at a time, and reads its own CPU time (every thread).
Reported: CPU per request of each client (median of ``--runs`` interleaved runs), the client's share
of what a gateway spends per turn on the upstream leg.  Run it with the serve extra and aiohttp::

    python benchmarks/serve_transport.py --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import serve  # benchmarks/serve.py: the instant upstream and the process helpers

Post = Callable[[bytes], Awaitable[bytes]]


def body(tokens: int) -> bytes:
    """A chat body of a conversation about ``tokens`` long (the workload's filler text)."""
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for turn in range(8):
        messages.append({"role": "user", "content": serve.filler(0, turn, tokens // 16)})
        messages.append({"role": "assistant", "content": serve.filler(1, turn, tokens // 16)})
    chat = {"model": "m", "messages": messages, "logprobs": True, "return_token_ids": True, "stream": False}
    return json.dumps(chat, ensure_ascii=False, separators=(",", ":")).encode()


async def with_httpx(url: str, concurrency: int) -> tuple[Post, Callable[[], Awaitable[None]]]:
    import httpx

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency, keepalive_expiry=2.0)
    client = httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0), limits=limits)

    async def post(payload: bytes) -> bytes:
        answer = await client.post(url, content=payload, headers={"content-type": "application/json"})
        return answer.content

    return post, client.aclose


async def with_aiohttp(url: str, concurrency: int) -> tuple[Post, Callable[[], Awaitable[None]]]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=concurrency, keepalive_timeout=2.0)
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60.0, connect=10.0))

    async def post(payload: bytes) -> bytes:
        async with session.post(url, data=payload, headers={"content-type": "application/json"}) as answer:
            return await answer.read()

    return post, session.close


CLIENTS = {"httpx": with_httpx, "aiohttp": with_aiohttp}


async def measure(name: str, url: str, payload: bytes, requests: int, concurrency: int) -> float:
    """CPU seconds per request of ``requests`` POSTs through client ``name``."""
    post, close = await CLIENTS[name](url, concurrency)
    await post(payload)  # warm: connection, imports
    queue = iter(range(requests))

    async def worker() -> None:
        for _ in queue:
            answer = await post(payload)
            assert answer.startswith(b"{")

    start = time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    spent = time.process_time() - start
    await close()
    return spent / requests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", nargs="+", default=list(CLIENTS), choices=list(CLIENTS))
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--concurrency", nargs="+", type=int, default=[1, 32])
    parser.add_argument("--tokens", type=int, default=32_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--loop", default="asyncio", choices=["asyncio", "uvloop"])
    args = parser.parse_args()
    port = serve.free_port()
    upstream = subprocess.Popen([sys.executable, __file__.replace("serve_transport", "serve"), "--upstream", str(port)])
    try:
        serve.wait_ready(f"http://127.0.0.1:{port}/health", upstream)
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        payload = body(args.tokens)
        results: dict[tuple[str, int], list[float]] = {}
        runner: Any = asyncio.run
        if args.loop == "uvloop":
            import uvloop

            runner = uvloop.run
        for run in range(args.runs):
            order = args.clients[run % len(args.clients) :] + args.clients[: run % len(args.clients)]
            for concurrency in args.concurrency:
                for name in order:
                    cpu = runner(measure(name, url, payload, args.requests, concurrency))
                    results.setdefault((name, concurrency), []).append(cpu)
        print(f"upstream leg CPU per request ({len(payload) // 1000} kB body, {args.loop} loop), "
              f"median of {args.runs} run(s)")  # fmt: skip
        print(f"{'client':<10}{'concurrency':>12}{'cpu/request ms':>16}")
        for (name, concurrency), values in sorted(results.items(), key=lambda item: (item[0][1], item[0][0])):
            print(f"{name:<10}{concurrency:>12}{1000 * statistics.median(values):>16.3f}")
    finally:
        serve.stop(upstream)


if __name__ == "__main__":
    main()
