"""Benchmark workloads: long-context coding-agent turn logs, generated once and cached on disk.

A workload is a folder of turn-log Parquet files written through the real
capture writer.  Generators are pluggable (``GENERATORS``): ``synthetic`` is
built here with ``TurnLogWriter``; ``swe`` and ``qwen3`` use ``tito simulate
--profile swe|qwen3`` (the real Qwen3 tokenizer and chat template).  Every generator is deterministic for its
parameters, and the cache key is the parameters, so reruns reuse the files.

The synthetic session looks like a coding agent at work: a long system prompt
with tool specs, a task, then turns of (assistant tool call → tool result)
whose prompts grow to past 100k tokens.  Realistic JSON messages make the
reader's message parsing do real work; the echoed assistant message has its
keys in a different order from the recorded response (identity is canonical
JSON); every 7th turn re-tokenizes the tail of the previous output (a
realign); one sub-agent per session starts its own conversation mid-way.
Sessions run ``concurrency`` at a time, their turns interleaved in the log the
way a capture of concurrent sessions interleaves them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tito_cli.capture.writer import TurnLogWriter  # noqa: E402

CACHE = REPO / ".benchmarks" / "workloads"
VOCAB = 151_000

_WORDS = (
    "def return self import from class if else for in while try except raise with as None True False "
    "assert yield lambda async await print len range dict list str int float value result error config "
    "path file line test request response token tokens session turn prompt output logprob sample"
).split()


@dataclass(frozen=True)
class WorkloadSpec:
    generator: str = "synthetic"
    sessions: int = 20
    turns: int = 40
    #: Tokens of the system prompt, and added per turn (tool result), and per response.
    system_tokens: int = 6000
    tool_tokens: int = 2300
    output_tokens: int = 300
    #: Sessions recorded at the same time (their turns interleave in the files).
    concurrency: int = 2
    #: Capture-writer flush size (rows per file).
    rows_per_file: int = 32
    seed: int = 0
    #: Turn-log format the synthetic generator writes (docs/spec.md §8).  1, the format the
    #: figures in docs/performance.md were taken on; benchmarks/compact.py writes both.
    format: int = 1

    @property
    def key(self) -> str:
        d = asdict(self)
        return "-".join(f"{k}{v}" for k, v in d.items())

    @property
    def final_prompt_tokens(self) -> int:
        return self.system_tokens + 200 + (self.turns - 1) * (self.tool_tokens + self.output_tokens)


def _text(rng: np.random.Generator, tokens: int) -> str:
    # About four characters per token, in code-like lines.
    words = rng.choice(len(_WORDS), size=max(1, tokens * 4 // 6))
    lines = []
    for start in range(0, len(words), 12):
        lines.append("    " + " ".join(_WORDS[w] for w in words[start : start + 12]))
    return "\n".join(lines)


class _Session:
    """One synthetic coding-agent session, producing its turns one at a time."""

    def __init__(self, spec: WorkloadSpec, number: int) -> None:
        self.spec = spec
        self.sid = f"swe-{spec.seed:02d}-{number:05d}"
        self.rng = np.random.default_rng([spec.seed, number])
        rng = self.rng
        tools = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in ("bash", "edit", "view", "search")
        ]
        self.tools = tools
        self.messages: list[dict[str, object]] = [
            {"role": "system", "content": "You are a coding agent.\n" + _text(rng, spec.system_tokens - 50)},
            {"role": "user", "content": "Fix the failing test.\n" + _text(rng, 150)},
        ]
        self.prompt = rng.integers(0, VOCAB, spec.system_tokens + 200, dtype=np.int32)
        self.turn = 0

    def _response(self, tokens: int) -> tuple[np.ndarray, np.ndarray, dict[str, object], dict[str, object]]:
        rng = self.rng
        output = rng.integers(0, VOCAB, tokens, dtype=np.int32)
        logprobs = -rng.exponential(0.3, tokens).astype(np.float32)
        call = {"id": f"call_{self.turn}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"cmd": _text(rng, 20)})}}
        content = _text(rng, tokens - 40)
        response = {"content": content, "tool_calls": [call], "role": "assistant"}
        echoed = {"role": "assistant", "tool_calls": [call], "content": content}  # same message, keys reordered
        return output, logprobs, response, echoed

    def turns(self) -> Iterator[dict[str, object]]:
        spec = self.spec
        rng = self.rng
        for turn in range(spec.turns):
            self.turn = turn
            output, logprobs, response, echoed = self._response(spec.output_tokens)
            yield {
                "session_id": self.sid, "prompt_ids": self.prompt, "output_ids": output,
                "output_logprobs": logprobs, "finish_reason": "tool_calls",
                "prompt_messages": json.dumps(self.messages, ensure_ascii=False),
                "response_message": json.dumps(response, ensure_ascii=False),
                "tools": self.tools if turn == 0 else None,
            }
            if turn == spec.turns // 2:
                yield from self._subagent()
            # The next prompt: this prompt, the output (its tail re-tokenized now and then), a tool result.
            held = output.copy()
            if turn % 7 == 6 and held.size > 3:
                held[-3:] = rng.integers(0, VOCAB, 3, dtype=np.int32)
            tool_ids = rng.integers(0, VOCAB, spec.tool_tokens, dtype=np.int32)
            self.prompt = np.concatenate((self.prompt, held, tool_ids))
            self.messages = [*self.messages, echoed,
                             {"role": "tool", "tool_call_id": f"call_{turn}", "content": _text(rng, spec.tool_tokens)}]

    def _subagent(self) -> Iterator[dict[str, object]]:
        """A short sub-agent conversation: its own system prompt, so its own subtree and sample."""
        rng = self.rng
        messages: list[dict[str, object]] = [
            {"role": "system", "content": "You are a search sub-agent.\n" + _text(rng, 800)},
            {"role": "user", "content": "Find where the config is loaded."},
        ]
        prompt = rng.integers(0, VOCAB, 850, dtype=np.int32)
        for _ in range(4):
            output, logprobs, response, echoed = self._response(120)
            yield {
                "session_id": self.sid, "prompt_ids": prompt, "output_ids": output,
                "output_logprobs": logprobs, "finish_reason": "tool_calls",
                "prompt_messages": json.dumps(messages, ensure_ascii=False),
                "response_message": json.dumps(response, ensure_ascii=False),
            }
            tool_ids = rng.integers(0, VOCAB, 600, dtype=np.int32)
            prompt = np.concatenate((prompt, output, tool_ids))
            messages = [*messages, echoed, {"role": "tool", "content": _text(rng, 600)}]


def _generate_synthetic(spec: WorkloadSpec, out: Path) -> None:
    with TurnLogWriter(
        out, max_rows=spec.rows_per_file, max_bytes=1 << 40, max_age=None, name="bench", format=spec.format
    ) as log:
        pending = list(range(spec.sessions))
        running: list[Iterator[dict[str, object]]] = []
        # Round-robin over `concurrency` running sessions; a finished one is replaced by the next.
        while pending or running:
            while pending and len(running) < spec.concurrency:
                running.append(_Session(spec, pending.pop(0)).turns())
            for it in list(running):
                turn = next(it, None)
                if turn is None:
                    running.remove(it)
                    continue
                log.record_turn(
                    turn["session_id"], turn["prompt_ids"], turn["output_ids"], turn["output_logprobs"],
                    turn["finish_reason"], turn["prompt_messages"], turn["response_message"], tools=turn.get("tools"),
                )
        for number in range(spec.sessions):
            sid = f"swe-{spec.seed:02d}-{number:05d}"
            log.finish_session(sid, reward=float(number % 3 == 0), index=number, group_index=number // 4)


def _simulated(profile: str) -> Callable[[WorkloadSpec, Path], None]:
    """``tito simulate --profile PROFILE`` (the turns, sizes and features are the profile's, not the spec's)."""

    def generate(spec: WorkloadSpec, out: Path) -> None:
        cmd = [sys.executable, "-m", "tito_cli", "simulate", "--profile", profile,
               "--sessions", str(spec.sessions), "--seed", str(spec.seed), "--out", str(out)]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if done.returncode != 0:
            needs = f"the {profile} workload needs 'tito simulate --profile {profile}'"
            raise SystemExit(f"{needs}:\n{done.stderr.strip()}")

    return generate


#: Generators that write format 1 when the spec says so; the others write what ``tito simulate`` writes.
FORMAT_AWARE = frozenset({"synthetic"})

GENERATORS: dict[str, Callable[[WorkloadSpec, Path], None]] = {
    "synthetic": _generate_synthetic,
    "swe": _simulated("swe"),
    "qwen3": _simulated("qwen3"),
}


def ensure(spec: WorkloadSpec, log: Callable[[str], None] = print) -> Path:
    """The workload's folder, generating it first when it is not cached."""
    folder = CACHE / spec.key
    if (folder / "COMPLETE").exists():
        return folder
    if folder.exists():
        shutil.rmtree(folder)
    log(f"generating workload {spec.key} …")
    tmp = folder.with_name(folder.name + ".partial")
    if tmp.exists():
        shutil.rmtree(tmp)
    GENERATORS[spec.generator](spec, tmp / "logs")
    (tmp / "COMPLETE").write_text(json.dumps(asdict(spec)) + "\n")
    tmp.rename(folder)
    return folder
