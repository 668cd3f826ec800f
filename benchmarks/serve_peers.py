"""``benchmarks/serve.py --peers``: CPU per turn of each tito serve mode and the rLLM model gateway, side by side.

One instant upstream (``serve.py --upstream``) stands behind four gateways running at once: tito with
``--upstream-api chat``, tito ``generate`` with ``--history render`` (the default) and ``canonical``, and
the rLLM model gateway (``rllm-model-gateway``, the ``import`` extra; its CLI and SQLite store, as
``tests/support/rllm_gateway.py`` starts it). Each run drives every gateway in turn (the order rotates from run
to run: interleaved) with the agent-loop workload of ``serve.py`` at each ``--sessions``, and reads
each gateway's CPU time from outside it (the kernel's clock of the process: every thread) over its
phase. tito's gateways run with ``TITO_SERVE_DEBUG_METRICS=1``: their event-loop lag p99 over the phase
comes from ``GET /debug/metrics`` (the lag probe's own wake-ups, about 1% of a core, are in tito's CPU),
and the same probe in an idle process (``serve.py --probe``) gives the machine's share of it.
Reported: medians over ``--runs`` of CPU per turn, loop lag p99 and what the clients waited for a turn
through each gateway (p50, p99: the same workload through each, so comparable within a run), and CPU per
turn as a ratio to tito ``chat``'s within each run (then the median of the ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import serve  # benchmarks/serve.py: the upstream, the workload, the process helpers


@dataclass(frozen=True)
class Gateway:
    """One gateway of the comparison: tito with ``options``, or the rLLM model gateway (``options`` None)."""

    options: list[str] | None
    #: Python run in tito's process before ``tito serve`` (``serve_variants.py``: a variant of the gateway).
    prelude: str = ""

    @property
    def tito(self) -> bool:
        return self.options is not None


MODES: dict[str, Gateway] = {
    "tito chat": Gateway(["--upstream-api", "chat"]),
    "tito generate render": Gateway(["--upstream-api", "generate", "--history", "render"]),
    "tito generate canonical": Gateway(["--upstream-api", "generate", "--history", "canonical"]),
    "rLLM gateway": Gateway(None),
}
REFERENCE = "tito chat"
#: What a prelude is followed by: ``tito serve`` with the command line's arguments.
RUN_TITO = "\nimport sys\nfrom tito_cli.cli import main\nsys.argv[0] = 'tito'\nmain()\n"


def start(
    mode: str, gateway: Gateway, upstream: str, work: Path, extra: Sequence[str] = ()
) -> tuple[subprocess.Popen[bytes], str]:
    port = serve.free_port()
    slug = mode.replace(" ", "-")
    if not gateway.tito:
        command = [
            sys.executable, "-m", "rllm_model_gateway", "--host", "127.0.0.1", "--port", str(port),
            "--worker", f"{upstream}/v1", "--db-path", str(work / f"{slug}.db"), "--store", "sqlite",
            "--log-level", "warning",
        ]  # fmt: skip
        health = "/health"
    else:
        tito = ["-c", gateway.prelude + RUN_TITO] if gateway.prelude else ["-m", "tito_cli"]
        command = [
            sys.executable, *tito, "serve", "--logs", str(work / slug), "--upstream", upstream,
            "--tokenizer", str(serve.QWEN3), "--port", str(port), *gateway.options, *extra,
        ]  # fmt: skip
        health = "/healthz"
    env = dict(os.environ, TITO_SERVE_DEBUG_METRICS="1", NO_COLOR="1")
    proc = subprocess.Popen(command, cwd=serve.REPO, env=env, stdout=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    serve.wait_ready(f"{url}{health}", proc)
    return proc, url


@dataclass(frozen=True)
class Measured:
    """One phase through one gateway (seconds)."""

    cpu_per_turn: float
    #: The gateway's loop lag p99 (tito only), and the idle probe's over the same phase.
    lag_p99: float | None
    idle_lag_p99: float | None
    #: What the clients waited for a turn through the gateway, p50 and p99.
    turn_p50: float
    turn_p99: float


def phase(tito: bool, proc: subprocess.Popen[bytes], url: str, sessions: int, args: argparse.Namespace,
          tag: str, probe: str | None = None) -> Measured:
    """CPU per turn, loop lag p99 and turn latency of one phase through one gateway, and the idle probe's lag."""
    import httpx

    def lag_p99(base: str) -> float | None:
        p99 = (httpx.get(f"{base}/debug/metrics", timeout=10).json().get("loop_lag") or {}).get("p99_ms")
        return None if p99 is None else p99 / 1000

    sids = [f"{tag}-s{s}" for s in range(sessions)]

    async def finish(client: httpx.AsyncClient, s: int) -> None:
        if tito:
            done = await client.post(f"{url}/sessions/{sids[s]}/finish", json={"reward": 1.0})
            if done.status_code != 200:
                raise SystemExit(f"finish {sids[s]}: {done.status_code} {done.text[:300]}")

    for base in ([url] if tito else []) + ([probe] if probe else []):
        httpx.get(f"{base}/debug/metrics", params={"reset": "1"}, timeout=10).raise_for_status()
    cpu0 = serve.proc_cpu_seconds(proc.pid)
    done = asyncio.run(serve.run_phase(
        lambda s: f"{url}/sessions/{sids[s]}/v1/chat/completions",
        serve.chat_bodies(args.turns, args.prompt_tokens, direct=False), sessions, args.turns, finish,
    ))
    cpu = serve.proc_cpu_seconds(proc.pid) - cpu0
    return Measured(
        cpu / (sessions * args.turns), lag_p99(url) if tito else None, lag_p99(probe) if probe else None,
        serve.quantile(done.latencies, 0.5), serve.quantile(done.latencies, 0.99),
    )


def peers(
    args: argparse.Namespace, work: Path, modes: dict[str, Gateway] | None = None, reference: str = REFERENCE
) -> str:
    """The side-by-side table of ``modes`` (default: :data:`MODES`), ratios to ``reference``'s CPU per turn."""
    import httpx

    modes = MODES if modes is None else modes
    up_port = serve.free_port()
    upstream = subprocess.Popen([sys.executable, str(serve.HERE / "serve.py"), "--upstream", str(up_port)],
                                cwd=serve.REPO)
    probe_port = serve.free_port()
    prober = subprocess.Popen([sys.executable, str(serve.HERE / "serve.py"), "--probe", str(probe_port)],
                              cwd=serve.REPO)
    up, probe = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{probe_port}"
    gateways: dict[str, tuple[subprocess.Popen[bytes], str]] = {}
    #: (mode, sessions) -> per run: cpu per turn, lag p99, ratio to the reference's cpu in that run.
    cpu: dict[tuple[str, int], list[float]] = {}
    lag: dict[tuple[str, int], list[float]] = {}
    idle: dict[tuple[str, int], list[float]] = {}
    ratio: dict[tuple[str, int], list[float]] = {}
    waits: dict[tuple[str, int], list[tuple[float, float]]] = {}
    names = list(modes)
    try:
        serve.wait_ready(f"{up}/health", upstream)
        serve.wait_ready(f"{probe}/health", prober)
        for mode, gateway in modes.items():
            gateways[mode] = start(mode, gateway, up, work, args.gateway_option)
            warm = argparse.Namespace(turns=2, prompt_tokens=200)
            phase(gateway.tito, *gateways[mode], 2, warm, f"warm-{len(gateways)}")
            if gateway.tito:  # what the variant runs on (serve_variants.py checks its preludes took)
                metrics = httpx.get(f"{gateways[mode][1]}/debug/metrics", timeout=10).json()
                print(f"  {mode}: event loop {metrics['event_loop']}, switch interval "
                      f"{metrics['switch_interval_ms']} ms", file=sys.stderr)
        for run in range(args.runs):
            order = names[run % len(names):] + names[: run % len(names)]
            for sessions in args.sessions:
                measured = {}
                for mode in order:
                    tag = f"r{run}-c{sessions}-{names.index(mode)}"
                    got = phase(modes[mode].tito, *gateways[mode], sessions, args, tag, probe)
                    per_turn, p99, idle_p99 = got.cpu_per_turn, got.lag_p99, got.idle_lag_p99
                    measured[mode] = per_turn
                    waits.setdefault((mode, sessions), []).append((got.turn_p50, got.turn_p99))
                    cpu.setdefault((mode, sessions), []).append(per_turn)
                    if p99 is not None:
                        lag.setdefault((mode, sessions), []).append(p99)
                    if idle_p99 is not None:
                        idle.setdefault((mode, sessions), []).append(idle_p99)
                    print(f"  run {run + 1} {sessions:>3} sessions {mode:<24} cpu/turn {per_turn * 1000:6.2f} ms"
                          f"{'' if p99 is None else f', loop lag p99 {p99 * 1000:.1f} ms'}"
                          f"{'' if idle_p99 is None else f', idle probe {idle_p99 * 1000:.1f} ms'}", file=sys.stderr)
                for mode in order:
                    ratio.setdefault((mode, sessions), []).append(measured[mode] / measured[reference])
    finally:
        for proc, _ in gateways.values():
            serve.stop(proc)
        serve.stop(upstream)
        serve.stop(prober)
    return table(args, names, reference, cpu, lag, idle, ratio, waits)


def table(args: argparse.Namespace, names: list[str], reference: str, cpu: dict[Any, list[float]],
          lag: dict[Any, list[float]], idle: dict[Any, list[float]], ratio: dict[Any, list[float]],
          waits: dict[Any, list[tuple[float, float]]]) -> str:
    med = statistics.median
    against = "vs tito chat" if reference == REFERENCE else "vs first"
    lines = [
        f"CPU per turn side by side: {args.turns} turns a session, prompts growing to ~{args.prompt_tokens:,} "
        f"tokens, {args.runs} interleaved run(s), medians",
        f"{'gateway':<24}{'sessions':>9}{'cpu/turn ms':>12}{against:>13}{'loop lag p99 ms':>16}{'lag/cpu':>8}"
        f"{'idle lag p99 ms':>16}{'turn p50 ms':>12}{'turn p99 ms':>12}",
    ]
    for mode in names:
        for sessions in args.sessions:
            key = (mode, sessions)
            c = med(cpu[key])
            lagged = f"{med(lag[key]) * 1000:>16.1f}{med(lag[key]) / c:>8.1f}" if key in lag else f"{'-':>16}{'-':>8}"
            machine = f"{med(idle[key]) * 1000:>16.1f}" if key in idle else f"{'-':>16}"
            waited = f"{med(w[0] for w in waits[key]) * 1000:>12.1f}{med(w[1] for w in waits[key]) * 1000:>12.1f}"
            lines.append(f"{mode:<24}{sessions:>9}{c * 1000:>12.2f}{med(ratio[key]):>12.2f}x{lagged}{machine}{waited}")
    return "\n".join(lines)
