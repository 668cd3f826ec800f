"""``benchmarks/serve.py --quick`` runs end to end against a real ``tito serve`` and prints its table.

No timing is asserted (the machine is shared): the run must finish, measure both paths for every
concurrency and upstream kind, and get the event-loop lag from inside the gateway.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.helpers import REPO, needs

needs("uvicorn", "serve", module_level=True)  # skipped without the serve extra, failed under CI

COLUMNS = ["sessions", "direct p50", "p99", "gateway p50", "p99", "added p50", "p99", "ratio p50", "loop lag p99",
           "idle lag p99", "cpu/turn", "rss MB"]


#: Each upstream kind's table title (one benchmark run per kind: each starts its own gateway).
TITLES = {"chat": "upstream chat", "generate": "upstream generate --history render"}


@pytest.mark.parametrize("upstream_api", ["chat", "generate"])
def test_quick_mode_measures_both_paths_and_the_gateway(upstream_api: str) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/serve.py", "--quick", "--upstream-api", upstream_api],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    [block] = [block.splitlines() for block in done.stdout.strip().split("\n\n")]
    assert block[0].split(":")[0] == TITLES[upstream_api]
    assert "2 turns a session, prompts growing to ~1,000 tokens, 1 run(s), medians (ms)" in block[0]
    header = block[1]
    assert [column for column in COLUMNS if column in header] == COLUMNS
    rows = [line.split() for line in block[2:4]]
    assert [row[0] for row in rows] == ["1", "2"]
    for row in rows:
        values = [float(v) for v in row[1:]]
        direct_p50, gateway_p50, lag, idle_lag, cpu, rss = values[0], values[2], *values[7:11]
        assert direct_p50 > 0 and gateway_p50 > 0
        assert lag >= 0 and idle_lag >= 0 and cpu > 0 and rss > 10
    assert block[4].startswith("gateway RSS after each phase, in order (MB): ")
    assert len(block[4].split(": ")[1].split()) == 2
    if upstream_api == "generate":
        # The generate upstream's prompts are the gateway's own renders, counted in real tokens.
        assert block[5].startswith("longest prompt the gateway rendered: ")
    else:
        assert len(block) == 5


def test_context_cpu_mode_measures_both_histories_at_each_context() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/serve.py", "--context-cpu", "--quick"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    title, header, *rows = done.stdout.strip().splitlines()
    assert title.startswith("gateway CPU per turn, generate upstream, 2 turns after the first")
    assert header.split() == ["history", "1,000", "tok", "3,000", "tok", "ratio"]
    assert [row.split()[0] for row in rows] == ["render", "canonical"]
    for row in rows:
        cells = row.split()
        # CPU is read in clock ticks (10 ms): two quick turns may round to zero, never below it.
        assert float(cells[1]) >= 0 and float(cells[3]) >= 0 and cells[5].endswith("x")


def test_peers_mode_measures_every_mode_and_the_rllm_gateway_side_by_side() -> None:
    needs("rllm_model_gateway", "import")
    done = subprocess.run(
        [sys.executable, "benchmarks/serve.py", "--peers", "--quick"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    title, header, *rows = done.stdout.strip().splitlines()
    assert title.startswith("CPU per turn side by side: 2 turns a session, prompts growing to ~1,000 tokens, 1 inter")
    assert header.split() == ["gateway", "sessions", "cpu/turn", "ms", "vs", "tito", "chat", "loop", "lag", "p99", "ms",
                              "lag/cpu", "idle", "lag", "p99", "ms", "turn", "p50", "ms", "turn", "p99", "ms"]
    names = [" ".join(row.split()[:-8]) for row in rows]
    assert names == [name for name in ("tito chat", "tito generate render", "tito generate canonical", "rLLM gateway")
                     for _ in (1, 2)]
    for row in rows:
        cells = row.split()[-8:]
        assert cells[0] in ("1", "2") and float(cells[1]) > 0 and cells[2].endswith("x")
        if row.startswith("tito"):  # the loop lag is measured inside tito's gateways only
            assert float(cells[3]) >= 0 and float(cells[4]) >= 0
        else:
            assert cells[3:5] == ["-", "-"]
        assert float(cells[5]) >= 0  # the idle probe's, for every phase
        assert 0 < float(cells[6]) <= float(cells[7])  # the clients' waits: p50, p99
    ratios = {" ".join(row.split()[:-8]): row.split()[-6] for row in rows}
    assert ratios["tito chat"] == "1.00x"


#: asyncio's own event loop on Linux, as GET /debug/metrics names it.
ASYNCIO_LOOP = "asyncio.unix_events._UnixSelectorEventLoop"


@pytest.mark.parametrize(
    ("variant_set", "setups"),
    [
        ("loop", {"chat uvloop": ("uvloop.Loop", 2.0), "chat asyncio": (ASYNCIO_LOOP, 2.0)}),
        ("switch", {"chat switch 2 ms": ("uvloop.Loop", 2.0), "chat switch 1 ms": ("uvloop.Loop", 1.0),
                    "chat switch 5 ms": ("uvloop.Loop", 5.0)}),
    ],
)
def test_variants_run_side_by_side_each_on_what_it_names(
    variant_set: str, setups: dict[str, tuple[str, float]]
) -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/serve_variants.py", variant_set, "--runs", "1", "--turns", "2",
         "--prompt-tokens", "1000", "--sessions", "2"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    title, header, *rows = done.stdout.strip().splitlines()
    assert title.startswith("CPU per turn side by side: 2 turns a session")
    assert header.split()[4:6] == ["vs", "first"]
    assert [" ".join(row.split()[:-8]) for row in rows] == list(setups)
    assert rows[0].split()[-6] == "1.00x"
    for name, (loop, interval) in setups.items():  # each variant's prelude took, in its own gateway process
        assert f"  {name}: event loop {loop}, switch interval {interval} ms" in done.stderr.splitlines()


def test_tokenizer_parts_times_the_tokenizer_whole_and_without_each_step() -> None:
    done = subprocess.run(
        [sys.executable, "benchmarks/tokenizer_parts.py", "--runs", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    title, *rows = done.stdout.strip().splitlines()
    assert title.startswith("Qwen3 encode_batch_fast, one text of 2,0")
    assert [row[:18].strip() for row in rows] == ["as it is", "no normalizer", "no pre-tokenizer"]
    assert rows[0].split()[-1] == "1.00x" and all(float(row.split()[-2]) > 0 for row in rows)
