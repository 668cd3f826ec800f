"""What ``tito serve`` adds to a generation call, at 1, 16 and 64 concurrent sessions, prompts growing to ~32k tokens.

    python benchmarks/serve.py [--upstream-api chat generate] [--sessions 1 16 64] [--turns 16]
                               [--prompt-tokens 32000] [--runs 3] [--history render|canonical] [--fsync] [--quick]
                               [--gateway-option=--workers=4 ...]
    python benchmarks/serve.py --context-cpu [--contexts 3000 30000] [--turns 40] [--runs 3] [--quick]
    python benchmarks/serve.py --peers [--sessions 8 32] [--turns 16] [--runs 3] [--quick]

``--peers`` (``serve_peers.py``): CPU per turn of every tito mode and the rLLM model gateway side by side.

An upstream that answers instantly (this script run with ``--upstream PORT`` in its own process: SGLang's
``/generate`` and vLLM's ``/v1/chat/completions`` shapes with token ids and logprobs, a scripted tool call
tokenized once with the real Qwen3 tokenizer, the chat prompt's ids derived from the message bytes without
rendering) stands behind a real ``tito serve`` subprocess. Each session is an agent loop over the chat
dialect: the model calls a tool, the client appends the call and a tool result of ``prompt-tokens / turns``
tokens, and asks again, so the last prompt is about ``--prompt-tokens`` long. All sessions of a phase run at
once (``httpx``, one connection each); each session finishes with ``POST /sessions/{sid}/finish``.

For each concurrency the same workload runs twice in the same run: straight to the upstream (the baseline:
chat, the same bodies; generate, the very ``input_ids`` the gateway sent, read back from its log) and
through the gateway. Reported, as medians over ``--runs``: latency p50/p99 of each path, the added latency
(gateway minus baseline, per percentile) and the ratio; the gateway's event-loop lag p99 (measured inside it:
``TITO_SERVE_DEBUG_METRICS=1``, ``GET /debug/metrics``), its CPU time per turn (``time.process_time``
inside it, from the same endpoint) and its resident memory after the phase's sessions finished and it
went idle (``/proc/<pid>/status``, read once its idle trim ran; flat across phases and runs means finished
sessions leave nothing behind).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"

#: What the scripted model says every turn (Qwen3's raw output, ending with its end-of-turn token).
REASONING = "Read the next part of the file."
CALL_ARGUMENTS = '{"path": "part.txt"}'
RAW_REPLY = (
    f"<think>\n{REASONING}\n</think>\n\n<tool_call>\n"
    f'{{"name": "read", "arguments": {CALL_ARGUMENTS}}}\n</tool_call><|im_end|>'
)
TOOLS = [{
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}]
WORDS = (
    "the quick brown fox jumps over lazy dog while seven wizards quietly judge boxing matches near "
    "river banks under pale moon light and every careful engineer reads logs before shipping code"
).split()


# -- the instant upstream (its own process) -------------------------------------------------------


def upstream_app() -> Any:
    """A Starlette app answering /generate and /v1/chat/completions at once, in the upstreams' shapes."""
    import numpy as np
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(QWEN3 / "tokenizer.json"))
    output_ids = tokenizer.encode(RAW_REPLY, add_special_tokens=False).ids
    logprobs = [-0.01 * (1 + i % 7) for i in range(len(output_ids))]
    end = output_ids[-1]
    counter = {"n": 0}

    async def generate(request: Request) -> Response:
        body = json.loads(await request.body())
        counter["n"] += 1
        prompt = len(body.get("input_ids") or [])
        return JSONResponse({
            "text": RAW_REPLY,
            "output_ids": output_ids,
            "meta_info": {
                "id": body.get("rid") or f"gen-{counter['n']}",
                "finish_reason": {"type": "stop", "matched": end},
                "prompt_tokens": prompt,
                "completion_tokens": len(output_ids),
                "cached_tokens": 0,
                "output_token_logprobs": [[lp, i, None] for lp, i in zip(logprobs, output_ids, strict=True)],
            },
        })

    def prompt_ids(messages: Sequence[dict[str, Any]]) -> list[int]:
        # Stand-in ids, derived from the bytes (no template, no tokenizer): append-only as the history grows.
        parts = []
        for message in messages:
            content = message.get("content") or ""
            text = content if isinstance(content, str) else json.dumps(content)
            data = (message.get("role", "") + "\n" + text).encode()
            parts.append(np.frombuffer(data, np.uint8)[::4].astype(np.int64) + 1000)
        return np.concatenate(parts).tolist() if parts else []

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        counter["n"] += 1
        ids = prompt_ids(body.get("messages") or [])
        message = {
            "role": "assistant",
            "content": None,
            "reasoning_content": REASONING,
            "tool_calls": [{
                "id": f"call_{counter['n']:08x}",
                "type": "function",
                "function": {"name": "read", "arguments": CALL_ARGUMENTS},
            }],
        }
        return JSONResponse({
            "id": f"chatcmpl-{counter['n']}",
            "object": "chat.completion",
            "created": 0,
            "model": body.get("model", "qwen3"),
            "choices": [{
                "index": 0,
                "message": message,
                "logprobs": {"content": [
                    {"token": f"token_id:{i}", "logprob": lp, "bytes": None, "top_logprobs": []}
                    for lp, i in zip(logprobs, output_ids, strict=True)
                ]},
                "finish_reason": "tool_calls",
                "stop_reason": None,
                "token_ids": output_ids,
            }],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(output_ids),
                      "total_tokens": len(ids) + len(output_ids)},
            "prompt_token_ids": ids,
        })

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    return Starlette(routes=[
        Route("/generate", generate, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/health", health),
        Route("/v1/models", health),
    ])


def serve_upstream(port: int) -> None:
    import uvicorn

    # uvicorn's default keep-alive timeout (5 s) equals httpx's pool expiry: under load a pooled connection
    # the server is closing gets reused and the call fails (ReadError). Long here, so every phase completes.
    uvicorn.run(
        upstream_app(), host="127.0.0.1", port=port, log_level="warning", access_log=False, timeout_keep_alive=120
    )


def serve_probe(port: int) -> None:
    """An idle process measuring its own loop lag as the gateway does: what the machine alone adds."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    sys.path.insert(0, str(REPO))
    from tito_cli.serve.debug_metrics import LoopLagMonitor

    monitor = LoopLagMonitor()

    async def metrics(request: Request) -> Response:
        monitor.start()
        snapshot = monitor.snapshot()
        if request.query_params.get("reset") == "1":
            monitor.reset()
        return JSONResponse(snapshot)

    app = Starlette(routes=[Route("/debug/metrics", metrics), Route("/health", metrics)])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- processes -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{proc.args} exited with {proc.returncode} before answering {url}")
        try:
            if httpx.get(url, timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} did not answer within {timeout:.0f} s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def proc_cpu_seconds(pid: int) -> float:
    """A process's CPU time from outside it: for --context-cpu, whose gateway runs without the debug metrics
    (their lag probe wakes every 5 ms and would add its own CPU to each turn).

    Linux's CPU clock of the process (nanoseconds, every thread's time, those that ended included), else
    ``/proc/<pid>/stat``'s user and system time in clock ticks (10 ms: 40 turns of 6 ms read ±4 %).
    """
    try:
        return time.clock_gettime(((~pid) << 3) | 2)  # the kernel's MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except (OSError, AttributeError):
        pass
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def gateway_cpu_seconds(gateway_url: str) -> float:
    """The gateway's CPU time so far, read inside it (``time.process_time``: finer than /proc's 10 ms ticks,
    which round a quick phase's few turns to zero)."""
    import httpx

    answer = httpx.get(f"{gateway_url}/debug/metrics", timeout=10)
    answer.raise_for_status()
    return float(answer.json()["cpu_seconds"])


def rss_once_idle(gateway_url: str, pid: int, trims_before: int, wait: float = 15.0) -> int:
    """The gateway's RSS once it went idle after the phase and gave freed memory back (its idle trim), or
    after ``wait`` seconds."""
    import httpx

    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if httpx.get(f"{gateway_url}/debug/metrics", timeout=10).json()["idle_trims"] > trims_before:
            break
        time.sleep(0.2)
    return proc_rss_bytes(pid)


def proc_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


# -- the workload ----------------------------------------------------------------------------------


def filler(session: int, turn: int, tokens: int) -> str:
    """A tool result of about ``tokens`` tokens (common words: about one token each), different per turn."""
    return " ".join(WORDS[(session * 31 + turn * 7 + j) % len(WORDS)] for j in range(tokens))


@dataclass
class Phase:
    latencies: list[float] = field(default_factory=list)
    #: (session index, turn) -> seconds, to pair the two paths turn by turn.
    by_turn: dict[tuple[int, int], float] = field(default_factory=dict)
    seconds: float = 0.0


async def run_phase(
    url_for: Any, bodies_for: Any, sessions: int, turns: int, finish: Any = None
) -> Phase:
    """``sessions`` agent loops at once; each posts ``turns`` requests one after the other."""
    import httpx

    phase = Phase()
    limits = httpx.Limits(max_connections=sessions + 4, max_keepalive_connections=sessions + 4)
    async with httpx.AsyncClient(timeout=300.0, limits=limits) as client:

        async def one(s: int) -> None:
            history: dict[str, Any] = {}
            for k in range(turns):
                url, body = url_for(s), bodies_for(s, k, history)
                data = json.dumps(body).encode()
                began = time.perf_counter()
                response = await client.post(url, content=data, headers={"content-type": "application/json"})
                payload = response.json()
                elapsed = time.perf_counter() - began
                if response.status_code != 200:
                    raise SystemExit(f"{url}: {response.status_code} {str(payload)[:500]}")
                history["last"] = payload
                phase.latencies.append(elapsed)
                phase.by_turn[(s, k)] = elapsed
            if finish is not None:
                await finish(client, s)

        began = time.perf_counter()
        await asyncio.gather(*(one(s) for s in range(sessions)))
        phase.seconds = time.perf_counter() - began
    return phase


def chat_bodies(turns: int, prompt_tokens: int, direct: bool) -> Any:
    """Each session's chat-completions bodies, grown from the previous answer (an agent loop)."""
    per_turn = max(1, prompt_tokens // max(1, turns))
    conversations: dict[int, list[dict[str, Any]]] = {}

    def body(s: int, k: int, history: dict[str, Any]) -> dict[str, Any]:
        if k == 0:
            conversations[s] = [
                {"role": "system", "content": "You are a careful agent. Read every part of the file."},
                {"role": "user", "content": f"Summarise the file for session {s}."},
            ]
        else:
            reply = history["last"]["choices"][0]["message"]
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
            if reply.get("reasoning_content"):
                assistant["reasoning_content"] = reply["reasoning_content"]
            calls = reply.get("tool_calls") or []
            if calls:
                assistant["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": c["function"]} for c in calls
                ]
            conversations[s].append(assistant)
            call_id = calls[0]["id"] if calls else "call_none"
            conversations[s].append({"role": "tool", "tool_call_id": call_id, "content": filler(s, k, per_turn)})
        out: dict[str, Any] = {"model": "qwen3", "messages": conversations[s], "tools": TOOLS}
        if direct:
            out.update({"return_token_ids": True, "logprobs": True})
        return out

    return body


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def logged_prompts(logs: Path, sids: Sequence[str]) -> dict[str, list[list[int]]]:
    """The prompt ids the gateway sent, per session in seq order (read back through tito's reader)."""
    sys.path.insert(0, str(REPO))
    from tito_cli.read.turnlog import TurnLog
    from tito_cli.read.validate import parse_session

    wanted = set(sids)
    return {
        rows.session_id: [t.prompt_ids.tolist() for t in parse_session(rows)]
        for rows in TurnLog.open([logs]).iter_sessions(only=wanted)
    }


# -- one mode --------------------------------------------------------------------------------------


@dataclass
class Row:
    sessions: int
    turns: int
    direct_p50: float
    direct_p99: float
    gateway_p50: float
    gateway_p99: float
    lag_p99: float | None
    cpu_per_turn: float
    rss: int
    last_prompt: int
    #: The same probe's lag p99 in an idle process during the gateway phase: the machine's share.
    idle_lag_p99: float | None = None


def run_mode(upstream_api: str, args: argparse.Namespace, work: Path) -> list[list[Row]]:
    import httpx

    up_port, gw_port, probe_port = free_port(), free_port(), free_port()
    upstream = subprocess.Popen([sys.executable, str(HERE / "serve.py"), "--upstream", str(up_port)], cwd=REPO)
    probe = subprocess.Popen([sys.executable, str(HERE / "serve.py"), "--probe", str(probe_port)], cwd=REPO)
    pr = f"http://127.0.0.1:{probe_port}"
    logs = work / f"logs-{upstream_api}"
    env = dict(os.environ, TITO_SERVE_DEBUG_METRICS="1")
    gateway = subprocess.Popen(
        [sys.executable, "-m", "tito_cli", "serve", "--logs", str(logs), "--upstream", f"http://127.0.0.1:{up_port}",
         "--upstream-api", upstream_api, "--tokenizer", str(QWEN3), "--port", str(gw_port),
         *(["--history", args.history] if upstream_api == "generate" else []),
         *(["--fsync"] if args.fsync else []),
         # --quick reads the log back right after its short phases: flush it within a second, not ten.
         *(["--flush-every", "1"] if args.quick else []), *args.gateway_option],
        cwd=REPO, env=env,
    )
    up, gw = f"http://127.0.0.1:{up_port}", f"http://127.0.0.1:{gw_port}"
    runs: list[list[Row]] = []
    try:
        wait_ready(f"{up}/health", upstream)
        wait_ready(f"{pr}/health", probe)
        wait_ready(f"{gw}/healthz", gateway)
        # Warm-up, not measured: first connections, lazy imports, the first render.
        for url in (f"{gw}/sessions/bench-warm-up/v1/chat/completions", f"{up}/v1/chat/completions"):
            asyncio.run(run_phase(lambda s, url=url: url, chat_bodies(2, 200, direct=False), 1, 2))
        for run in range(args.runs):
            rows = []
            for sessions in args.sessions:
                tag = f"bench-{upstream_api}-r{run}-c{sessions}"
                sids = [f"{tag}-s{s}" for s in range(sessions)]

                async def finish(client: httpx.AsyncClient, s: int, sids: list[str] = sids) -> None:
                    done = await client.post(f"{gw}/sessions/{sids[s]}/finish", json={"reward": 1.0})
                    if done.status_code != 200:
                        raise SystemExit(f"finish {sids[s]}: {done.status_code} {done.text[:300]}")

                before = httpx.get(f"{gw}/debug/metrics", params={"reset": "1"}, timeout=10)
                before.raise_for_status()
                httpx.get(f"{pr}/debug/metrics", params={"reset": "1"}, timeout=10).raise_for_status()
                cpu0 = gateway_cpu_seconds(gw)
                through = asyncio.run(run_phase(
                    lambda s, sids=sids: f"{gw}/sessions/{sids[s]}/v1/chat/completions",
                    chat_bodies(args.turns, args.prompt_tokens, direct=False), sessions, args.turns, finish,
                ))
                metrics = httpx.get(f"{gw}/debug/metrics", timeout=10).json()
                cpu = float(metrics["cpu_seconds"]) - cpu0
                idle = httpx.get(f"{pr}/debug/metrics", timeout=10).json()
                rss = rss_once_idle(gw, gateway.pid, before.json()["idle_trims"])
                if upstream_api == "chat":
                    direct = asyncio.run(run_phase(
                        lambda s: f"{up}/v1/chat/completions",
                        chat_bodies(args.turns, args.prompt_tokens, direct=True), sessions, args.turns,
                    ))
                    last_prompt = -1
                else:
                    # The baseline sends the very ids the gateway sent (its log has them, once flushed).
                    prompts = wait_for_log(logs, sids, args.turns)
                    direct = asyncio.run(run_phase(
                        lambda s: f"{up}/generate",
                        lambda s, k, history, sids=sids, prompts=prompts: {
                            "input_ids": prompts[sids[s]][k],
                            "sampling_params": {"max_new_tokens": 64, "skip_special_tokens": False},
                            "return_logprob": True, "logprob_start_len": -1,
                        },
                        sessions, args.turns,
                    ))
                    last_prompt = max(len(p[-1]) for p in prompts.values())
                lag = (metrics.get("loop_lag") or {}).get("p99_ms")
                idle_lag = (idle.get("loop_lag") or {}).get("p99_ms")
                rows.append(Row(
                    sessions, sessions * args.turns,
                    quantile(direct.latencies, 0.5), quantile(direct.latencies, 0.99),
                    quantile(through.latencies, 0.5), quantile(through.latencies, 0.99),
                    None if lag is None else lag / 1000, cpu / (sessions * args.turns), rss, last_prompt,
                    None if idle_lag is None else idle_lag / 1000,
                ))
                print(f"  {upstream_api} run {run + 1} {sessions:>3} sessions: {describe(rows[-1])}", file=sys.stderr)
            runs.append(rows)
    finally:
        stop(gateway)
        stop(upstream)
        stop(probe)
    return runs


def wait_for_log(logs: Path, sids: Sequence[str], turns: int, timeout: float = 60.0) -> dict[str, list[list[int]]]:
    """The gateway's log of these sessions, once every turn is on disk (the writer flushes on its own)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            prompts = logged_prompts(logs, sids)
        except Exception:  # no file written yet
            prompts = {}
        if len(prompts) == len(sids) and all(len(p) == turns for p in prompts.values()):
            return prompts
        if time.monotonic() > deadline:
            raise SystemExit(f"the gateway's log under {logs} does not hold all {len(sids)} sessions' turns")
        time.sleep(0.5)


def describe(row: Row) -> str:
    return (
        f"direct p50 {row.direct_p50 * 1000:.1f} p99 {row.direct_p99 * 1000:.1f} ms, gateway p50 "
        f"{row.gateway_p50 * 1000:.1f} p99 {row.gateway_p99 * 1000:.1f} ms, lag p99 "
        f"{'-' if row.lag_p99 is None else f'{row.lag_p99 * 1000:.1f}'} ms, cpu/turn {row.cpu_per_turn * 1000:.1f} ms"
    )


def table(upstream_api: str, runs: list[list[Row]], args: argparse.Namespace) -> str:
    def med(values: Sequence[float]) -> float:
        return statistics.median(values)

    history = f" --history {args.history}" if upstream_api == "generate" else ""
    history += " --fsync" if args.fsync else ""
    lines = [
        f"upstream {upstream_api}{history}: {args.turns} turns a session, "
        f"prompts growing to ~{args.prompt_tokens:,} tokens, {args.runs} run(s), medians (ms)",
        f"{'sessions':>8} {'direct p50':>10} {'p99':>7} {'gateway p50':>11} {'p99':>7} {'added p50':>9} {'p99':>7} "
        f"{'ratio p50':>9} {'loop lag p99':>12} {'idle lag p99':>12} {'cpu/turn':>8} {'rss MB':>7}",
    ]
    for i, sessions in enumerate(args.sessions):
        rows = [run[i] for run in runs]
        d50, d99 = med([r.direct_p50 for r in rows]), med([r.direct_p99 for r in rows])
        g50, g99 = med([r.gateway_p50 for r in rows]), med([r.gateway_p99 for r in rows])
        a50 = med([r.gateway_p50 - r.direct_p50 for r in rows])
        a99 = med([r.gateway_p99 - r.direct_p99 for r in rows])
        lags = [r.lag_p99 for r in rows if r.lag_p99 is not None]
        lag = f"{med(lags) * 1000:12.1f}" if lags else f"{'-':>12}"
        idle = [r.idle_lag_p99 for r in rows if r.idle_lag_p99 is not None]
        lag += f" {med(idle) * 1000:12.1f}" if idle else f" {'-':>12}"
        lines.append(
            f"{sessions:>8} {d50 * 1000:>10.1f} {d99 * 1000:>7.1f} {g50 * 1000:>11.1f} {g99 * 1000:>7.1f} "
            f"{a50 * 1000:>9.1f} {a99 * 1000:>7.1f} {g50 / d50:>9.2f} {lag} "
            f"{med([r.cpu_per_turn for r in rows]) * 1000:>8.1f} {med([r.rss for r in rows]) / 2**20:>7.0f}"
        )
    rss = [f"{r.rss / 2**20:.0f}" for run in runs for r in run]
    lines.append(f"gateway RSS after each phase, in order (MB): {' '.join(rss)}")
    longest = max(r.last_prompt for run in runs for r in run)
    if longest > 0:
        lines.append(f"longest prompt the gateway rendered: {longest:,} tokens")
    return "\n".join(lines)


# -- per-turn CPU against the context (issue #31) ---------------------------------------------------


def grown_conversation(session: str, tokens: int) -> list[dict[str, Any]]:
    """A conversation of about ``tokens`` tokens: tool round trips of ~500-token results, as the gateway answers."""
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful agent. Read every part of the file."},
        {"role": "user", "content": f"Summarise the file ({session})."},
    ]
    for k in range(max(1, tokens // 520)):
        call = {"id": f"call_{k:08x}", "type": "function", "function": {"name": "read", "arguments": CALL_ARGUMENTS}}
        conversation.append({"role": "assistant", "content": "", "reasoning_content": REASONING, "tool_calls": [call]})
        conversation.append({"role": "tool", "tool_call_id": call["id"], "content": filler(k, k, 500)})
    return conversation


def context_cpu(args: argparse.Namespace, work: Path) -> str:
    """Gateway CPU per turn with ``generate`` at each context size, under ``--history render`` and ``canonical``.

    One session per (mode, context, run): its first request carries the whole grown conversation (rendered
    whole under either mode: nothing is held yet; not measured), then ``--turns`` turns each add the reply
    and a ~50-token tool result, measured by the gateway's CPU time over them. Each run plays every context
    in turn (3k, 30k, 3k, 30k, ...), so that the load of a shared machine weighs on both alike.
    """
    import httpx

    up_port = free_port()
    upstream = subprocess.Popen([sys.executable, str(HERE / "serve.py"), "--upstream", str(up_port)], cwd=REPO)
    up = f"http://127.0.0.1:{up_port}"
    results: dict[tuple[str, int], float] = {}
    try:
        wait_ready(f"{up}/health", upstream)
        for history in ("render", "canonical"):
            gw_port = free_port()
            gateway = subprocess.Popen(
                [sys.executable, "-m", "tito_cli", "serve", "--logs", str(work / f"logs-context-{history}"),
                 "--upstream", up, "--upstream-api", "generate", "--tokenizer", str(QWEN3),
                 "--port", str(gw_port), "--history", history],
                cwd=REPO,
            )
            gw = f"http://127.0.0.1:{gw_port}"
            try:
                wait_ready(f"{gw}/healthz", gateway)
                per_turn: dict[int, list[float]] = {context: [] for context in args.contexts}
                with httpx.Client(timeout=300.0) as client:
                    # Runs interleave the contexts, so that a change in the machine's load between runs
                    # weighs on every context alike rather than on the ratio.
                    for run, context in itertools.product(range(args.runs), args.contexts):
                        sid = f"context-{history}-{context}-r{run}"
                        url = f"{gw}/sessions/{sid}/v1/chat/completions"
                        conversation = grown_conversation(sid, context)
                        cpu0 = 0.0
                        for k in range(args.turns + 1):
                            if k == 1:  # the first request (the whole conversation rendered) is not measured
                                cpu0 = proc_cpu_seconds(gateway.pid)
                            answer = client.post(url, json={"model": "qwen3", "messages": conversation,
                                                            "tools": TOOLS})
                            if answer.status_code != 200:
                                raise SystemExit(f"{url}: {answer.status_code} {answer.text[:300]}")
                            reply = answer.json()["choices"][0]["message"]
                            calls = reply.get("tool_calls") or []
                            conversation.append({k2: v for k2, v in reply.items() if v is not None})
                            call_id = calls[0]["id"] if calls else "call_none"
                            conversation.append({"role": "tool", "tool_call_id": call_id,
                                                 "content": filler(run, k, 50)})
                        per_turn[context].append((proc_cpu_seconds(gateway.pid) - cpu0) / args.turns)
                        print(f"  context {history} {context:>6} tokens, run {run}: cpu/turn "
                              f"{per_turn[context][-1] * 1000:.1f} ms", file=sys.stderr)
                for context in args.contexts:
                    results[(history, context)] = statistics.median(per_turn[context])
            finally:
                stop(gateway)
    finally:
        stop(upstream)
    small, large = min(args.contexts), max(args.contexts)
    lines = [
        f"gateway CPU per turn, generate upstream, {args.turns} turns after the first, median of {args.runs} runs:",
        f"{'history':<10}" + "".join(f"{f'{c:,} tok':>12}" for c in args.contexts) + f"{'ratio':>8}",
    ]
    for history in ("render", "canonical"):
        # A quick run's small context can round to zero clock ticks: its ratio is then unbounded ("inf").
        base = results[(history, small)]
        ratio = results[(history, large)] / base if base > 0 else float("inf")
        cells = "".join(f"{results[(history, c)] * 1000:>9.1f} ms" for c in args.contexts)
        lines.append(f"{history:<10}{cells} {ratio:>6.2f}x")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--upstream-api", nargs="+", default=["chat", "generate"], choices=["chat", "generate"])
    parser.add_argument("--sessions", nargs="+", type=int, help="concurrent sessions (default 1 16 64; --peers: 8 32)")
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=32_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--history", default="render", choices=["render", "canonical"],
                        help="the generate upstream's --history (how the gateway builds prompt ids)")
    parser.add_argument("--fsync", action="store_true", help="the gateway with --fsync (journal fsynced per turn)")
    parser.add_argument("--gateway-option", action="append", default=[], metavar="OPTION",
                        help="one more tito serve option for every tito gateway, as one word "
                             "(--gateway-option=--workers=4); repeatable")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 1 and 2 sessions, 2 turns, 1k tokens, 1 run")
    parser.add_argument("--context-cpu", action="store_true",
                        help="instead: the gateway's CPU per turn at each --contexts size, both --history modes")
    parser.add_argument("--contexts", nargs="+", type=int, default=[3_000, 30_000],
                        help="context sizes (tokens) for --context-cpu")
    parser.add_argument("--peers", action="store_true",
                        help="instead: CPU per turn of tito chat, generate render and canonical and the rLLM gateway, "
                             "side by side (benchmarks/serve_peers.py)")
    parser.add_argument("--upstream", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--probe", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.upstream is not None:
        serve_upstream(args.upstream)
        return
    if args.probe is not None:
        serve_probe(args.probe)
        return
    if args.sessions is None:
        args.sessions = [8, 32] if args.peers else [1, 16, 64]
    if args.quick:
        args.sessions, args.turns, args.prompt_tokens, args.runs = [1, 2], 2, 1_000, 1
        args.contexts = [1_000, 3_000]
    if args.peers:
        from serve_peers import peers

        with tempfile.TemporaryDirectory(prefix="tito-serve-peers-") as tmp:
            print(peers(args, Path(tmp)))
        return
    if args.context_cpu:
        with tempfile.TemporaryDirectory(prefix="tito-serve-bench-") as tmp:
            print(context_cpu(args, Path(tmp)))
        return
    with tempfile.TemporaryDirectory(prefix="tito-serve-bench-") as tmp:
        for upstream_api in args.upstream_api:
            runs = run_mode(upstream_api, args, Path(tmp))
            print(table(upstream_api, runs, args))
            print()


if __name__ == "__main__":
    main()
