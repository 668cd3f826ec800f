"""``benchmarks/serve_transport.py`` measures each candidate upstream client against a real instant upstream.

No timing is asserted (the machine is shared): the run must finish and report a CPU per request for
every client at every concurrency asked.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.helpers import REPO, needs

needs("aiohttp", "serve", module_level=True)  # skipped without the serve extra, failed under CI


@pytest.mark.slow
@pytest.mark.benchmark
def test_every_client_is_measured_at_every_concurrency() -> None:
    command = [sys.executable, "benchmarks/serve_transport.py", "--runs", "1", "--requests", "8",
               "--concurrency", "1", "4", "--tokens", "2000"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    title, header, *rows = done.stdout.strip().splitlines()
    assert title.startswith("upstream leg CPU per request (") and "asyncio loop), median of 1 run(s)" in title
    assert header.split() == ["client", "concurrency", "cpu/request", "ms"]
    measured = {(row.split()[0], int(row.split()[1])): float(row.split()[2]) for row in rows}
    assert sorted(measured) == [("aiohttp", 1), ("aiohttp", 4), ("httpx", 1), ("httpx", 4)]
    assert all(value > 0 for value in measured.values())
