"""Routed experts in the turn log: bytes per token, and the rebuild's time with and without them.

    python benchmarks/provenance.py                      # 8 sessions x 8 turns, rows of 48 layers x top-8
    python benchmarks/provenance.py --sessions 4 --rounds 3 --layers 48 --topk 8

Writes one log of agent sessions (each turn appends a tool result and a reply to the last) through
the real capture writer, every call recorded with weight versions and the routed experts the
server returns for ``[start, len(tokens) - 1)``, ``start`` being what the session already holds
(a gateway that sends ``routed_experts_start_len``); and the same sessions without provenance.
Expert ids are drawn at random for each prefix (128 experts): real routing compresses no worse.

Prints the log sizes, the routed experts' bytes per token (stored, against the raw int32 bytes of the
rows the turns add), and the medians over ``--rounds`` of ``tito rebuild`` (in-process, one worker)
of the log without provenance, of the log with it, and of the log with it under ``--routed-experts``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from tito_cli.algorithm.policy import Policy
from tito_cli.capture.writer import TurnLogWriter
from tito_cli.run.rebuild import RebuildOptions, rebuild_with

EXPERTS = 128


def write_logs(folder: Path, sessions: int, turns: int, layers: int, topk: int) -> tuple[Path, Path, int, int]:
    """The log with provenance and the one without; the final tokens and the rows the turns added."""
    plain, rich = folder / "plain", folder / "routed"
    rng = np.random.default_rng(7)
    tokens_total = rows_added = 0
    with TurnLogWriter(plain, max_age=None, name="b") as a, TurnLogWriter(rich, max_age=None, name="b") as b:
        for s in range(sessions):
            sid = f"s{s:03d}"
            messages = [{"role": "system", "content": "agent"}, {"role": "user", "content": f"task {s}"}]
            prompt = rng.integers(1000, 50_000, 400).tolist()
            # One row per position of the session's one line of tokens (the prefix decides the row).
            routing = np.empty((0, layers, topk), dtype=np.int32)
            held = 0
            for t in range(turns):
                output = rng.integers(1000, 50_000, int(rng.integers(100, 400))).tolist()
                tokens = prompt + output
                need = len(tokens) - 1
                if len(routing) < need:
                    more = rng.integers(0, EXPERTS, (need - len(routing), layers, topk), dtype=np.int32)
                    routing = np.concatenate([routing, more])
                reply = {"role": "assistant", "content": f"reply {t}"}
                args = (sid, prompt, output, None, "stop", messages, reply)
                a.record_turn(*args)
                b.record_turn(
                    *args,
                    weight_versions=f"v{t // 3}",
                    routed_experts=routing[held:need],
                    routed_experts_start=held,
                    sampling={"temperature": 1.0},
                    call_kind="agent",
                )
                rows_added += need - held
                held = need
                messages = [*messages, reply, {"role": "tool", "content": f"result {t}"}]
                prompt = tokens + rng.integers(1000, 50_000, int(rng.integers(50, 300))).tolist()
            tokens_total += held + 1
            a.finish_session(sid, 1.0)
            b.finish_session(sid, 1.0)
    return plain, rich, tokens_total, rows_added


def size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.glob("*.parquet"))


def timed_rebuild(log: Path, out: Path, policy: Policy) -> float:
    run = RebuildOptions(overwrite=True, engine_options={"workers": 1})
    start = time.perf_counter()
    summary = rebuild_with([log], out, policy, run)
    elapsed = time.perf_counter() - start
    assert not summary.rejected, summary.rejected[:1]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--layers", type=int, default=48)
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plain, rich, tokens, rows = write_logs(folder, options.sessions, options.turns, options.layers, options.topk)
        raw = 4 * rows * options.layers * options.topk
        grown = size(rich) - size(plain)
        print(f"{options.sessions} sessions x {options.turns} turns, {tokens:,} tokens; rows of "
              f"{options.layers} layers x top-{options.topk} ({4 * options.layers * options.topk:,} raw bytes a row)")
        print(f"log without provenance: {size(plain):,} bytes; with it: {size(rich):,} bytes")
        print(f"rows the turns added: {rows:,} ({raw:,} raw bytes); the log grew by {grown:,} bytes = "
              f"{grown / raw:.2f}x the raw rows, {grown / tokens:,.0f} bytes per token")
        default = Policy.named("slime-v4")
        routed = Policy.named("slime-v4", routed_experts=True)
        times: dict[str, list[float]] = {"plain log": [], "log with provenance": [], "--routed-experts": []}
        for _ in range(options.rounds):
            times["plain log"].append(timed_rebuild(plain, folder / "a.parquet", default))
            times["log with provenance"].append(timed_rebuild(rich, folder / "b.parquet", default))
            times["--routed-experts"].append(timed_rebuild(rich, folder / "c.parquet", routed))
        base = statistics.median(times["plain log"])
        for name, values in times.items():
            median = statistics.median(values)
            print(f"rebuild, {name}: median {median:.3f} s ({median / base:.2f}x the plain log)")
        print(f"samples file with routed experts: {(folder / 'c.parquet').stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
