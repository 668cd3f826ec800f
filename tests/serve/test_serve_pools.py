"""The gateway's worker threads (``serve/pools.py``): Python work in one thread, the tokenizer's in ``workers``."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

from tito_cli.capture.writer import RecordedTurn
from tito_cli.serve.canonical import CanonicalHistory
from tito_cli.serve.history import RenderedHistory
from tito_cli.serve.pools import HEAVY_BYTES, Pools, in_workers, mark_request
from tito_cli.serve.recorder import Recorder
from tito_cli.serve.template import ChatTemplate
from tito_cli.serve.upstreams.base import Upstream, _prompt_ids


def test_python_work_never_runs_in_two_threads_at_once() -> None:
    pools = Pools(3)
    running, most, names = 0, 0, set()
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
            names.add(threading.current_thread().name)
        time.sleep(0.02)  # long enough for a second thread, if there were one, to start meanwhile
        with lock:
            running -= 1

    async def main() -> None:
        await asyncio.gather(*(pools.run(work) for _ in range(6)))

    try:
        asyncio.run(main())
    finally:
        pools.shutdown()
    assert most == 1
    assert len(names) == 1 and next(iter(names)).startswith("tito-serve_")


def test_marked_work_runs_in_as_many_threads_as_workers() -> None:
    pools = Pools(3)
    # Three calls meet at the barrier only if three threads run them at once (else: BrokenBarrierError).
    barrier = threading.Barrier(3, timeout=20)

    @in_workers
    def tokenize() -> str:
        barrier.wait()
        return threading.current_thread().name

    async def main() -> list[str]:
        return list(await asyncio.gather(*(pools.run(tokenize) for _ in range(3))))

    try:
        names = asyncio.run(main())
    finally:
        pools.shutdown()
    assert len(set(names)) == 3 and all(name.startswith("tito-serve-worker") for name in names)


def test_a_huge_request_runs_all_its_work_in_the_heavy_pool() -> None:
    pools = Pools(4)

    @in_workers
    def tokenize() -> str:
        return threading.current_thread().name

    def parse() -> str:
        return threading.current_thread().name

    async def request(declared: int) -> list[str]:
        mark_request(declared)  # (each task has its own copy of the context, as each request does)
        return [await pools.run(tokenize), await pools.run(parse)]

    async def main() -> tuple[list[str], list[str]]:
        huge = asyncio.create_task(request(HEAVY_BYTES + 1))
        small = asyncio.create_task(request(1000))
        return await huge, await small

    try:
        huge, small = asyncio.run(main())
    finally:
        pools.shutdown()
    assert pools.heavy_workers == 2
    assert all(name.startswith("tito-serve-heavy") for name in huge)
    assert small[0].startswith("tito-serve-worker") and small[1].startswith("tito-serve_")


def test_the_gateways_tokenizer_calls_are_marked_and_its_python_work_is_not() -> None:
    pools = Pools(2)
    try:
        for fn in (
            RenderedHistory.prompt, CanonicalHistory.prompt, ChatTemplate.configured,
            Upstream.vocabulary, _prompt_ids,
        ):  # fmt: skip
            assert pools.pool_for(fn) is pools.workers, fn
        # The tokenizer's decode holds the GIL (unlike its encode): a long output's is Python thread work.
        assert pools.pool_for(ChatTemplate.decode) is pools.python
    finally:
        pools.shutdown()


def test_a_turns_append_runs_in_the_python_thread_unless_it_waits_for_an_fsync(tmp_path: Path) -> None:
    turn = RecordedTurn("s", [1, 2], [3], [-0.5], "stop", [{"role": "user", "content": "x"}], {"role": "assistant"})

    def threads_of(fsync: bool) -> set[str]:
        pools = Pools(2)
        names: set[str] = set()

        async def offload(fn: Any, *args: Any) -> Any:
            def spied() -> Any:
                names.add(threading.current_thread().name)
                return fn(*args)

            return await asyncio.get_running_loop().run_in_executor(pools.pool_for(fn), spied)

        recorder = Recorder(tmp_path / str(fsync), tokenizer=None, flush_every=10.0, fsync=fsync, offload=offload)
        recorder.open()

        async def run() -> None:
            assert await recorder.record("s", turn) == 0
            assert await recorder.record("s", turn) == 1
            await recorder.close()

        try:
            asyncio.run(run())
        finally:
            pools.shutdown()
        return names

    assert {name.split("_")[0] for name in threads_of(False)} == {"tito-serve"}
    # An fsynced append waits for the disk: not in the one thread every request's Python work waits for.
    synced = threads_of(True)
    assert any(name.startswith("tito-serve-worker") for name in synced), synced
