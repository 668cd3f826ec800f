"""Regenerate the ``agent`` scenario: a small real tokenizer and agent sessions tokenized with it.

    python tests/scenarios/make_agent.py

The scenario stands in for real captured logs while the views are tested.
Its sessions are shaped so that each thing ``tito inspect`` must explain
happens at a known turn:

* ``s-7f3a-fix-tests`` — the main agent session:
  seq 0 is generated with a non-canonical tokenization of its tool-call
  arguments, so seq 1's re-tokenized prompt drifts inside seq 0's output
  (a **realign**); seq 2 is a **sub-agent** (another system prompt); a new
  user message at seq 4 makes the chat template drop earlier reasoning, so
  the prompt diverges before the latest response (a **fork**); seq 5 resends
  seq 4's prompt (a **retry**).
* ``s-7f9c-rewrite`` — the harness shortens a reply before sending it back
  (a **rewrite merge**).
* ``s-81d0-empty`` — an aborted turn with no output and a turn with an empty
  prompt: the session yields **no samples**.
* ``s-9e44-bad`` — logprobs that do not match the output: **rejected**.

Everything here is deterministic; the files are committed, so tests never
train a tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

HERE = Path(__file__).resolve().parent
TOKENIZER_DIR = HERE / "tokenizer"
SCENARIO_DIR = HERE / "agent"

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]

SYSTEM = "You are a coding agent. Use the tools to inspect and fix the repository."
SUB_SYSTEM = "You are a search sub-agent. Answer with file paths only."
TOOLS = [
    {"type": "function", "function": {"name": "run_tests", "parameters": {"path": "string"}}},
    {"type": "function", "function": {"name": "read_file", "parameters": {"path": "string"}}},
    {"type": "function", "function": {"name": "spawn_agent", "parameters": {"task": "string"}}},
]


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def render_assistant(message: dict[str, Any], with_reasoning: bool) -> str:
    """The assistant part of the chat template, after ``<|im_start|>assistant\\n``."""
    text = ""
    if with_reasoning and message.get("reasoning_content"):
        text += "<think>\n" + message["reasoning_content"] + "\n</think>\n\n"
    text += message.get("content") or ""
    for c in message.get("tool_calls") or []:
        fn = c["function"]
        payload = json.dumps({"name": fn["name"], "arguments": json.loads(fn["arguments"])})
        text += "<tool_call>\n" + payload + "\n</tool_call>"
    return text + "<|im_end|>"


def render_prompt(messages: list[dict[str, Any]]) -> str:
    """A Qwen3-like template: reasoning is kept only after the last user message."""
    last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
    out = ""
    for i, m in enumerate(messages):
        out += "<|im_start|>" + m["role"] + "\n"
        if m["role"] == "assistant":
            out += render_assistant(m, with_reasoning=i > last_user) + "\n"
        else:
            out += m["content"] + "<|im_end|>\n"
    return out + "<|im_start|>assistant\n"


def build_tokenizer(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return tok


class Session:
    def __init__(self, tok: Tokenizer, session_id: str) -> None:
        self.tok = tok
        self.session_id = session_id
        self.turns: list[dict[str, Any]] = []

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False).ids)

    def turn(
        self,
        messages: list[dict[str, Any]],
        response: dict[str, Any] | None,
        finish: str,
        *,
        output_ids: list[int] | None = None,
        logprobs: str = "ok",
        tools: Any = None,
    ) -> dict[str, Any]:
        prompt = self.encode(render_prompt(messages)) if messages else []
        if output_ids is None:
            output_ids = self.encode(render_assistant(response, with_reasoning=True)) if response else []
        seq = len(self.turns)
        lp = [-((seq * 31 + i * 17) % 97) / 64 for i in range(len(output_ids))]
        if logprobs == "short":
            lp = lp[:-1]
        record = {
            "session_id": self.session_id,
            "seq": seq,
            "prompt_ids": prompt,
            "output_ids": output_ids,
            "output_logprobs": lp if output_ids else None,
            "finish_reason": finish,
            "prompt_messages": messages,
            "response_message": response,
            "tools": tools,
            "metadata": {"harness": "demo-agent 0.3"},
        }
        self.turns.append(record)
        return record


def main_session(tok: Tokenizer) -> Session:
    s = Session(tok, "s-7f3a-fix-tests")
    sys = {"role": "system", "content": SYSTEM}
    user = {"role": "user", "content": "The test test_add fails. Please fix it."}
    a0 = {
        "role": "assistant",
        "reasoning_content": "Run the failing test first to see the error.",
        "content": "",
        "tool_calls": [call("run_tests", path="tests/test_utils.py")],
    }
    # The model spelled the path out byte by byte: a valid but non-canonical
    # tokenization, which re-tokenizing the history does not reproduce.
    canonical = render_assistant(a0, with_reasoning=True)
    cut = canonical.index("tests/test_utils.py")
    odd = s.encode(canonical[:cut])
    for ch in "tests/test_utils.py":
        odd += s.encode(ch)
    odd += s.encode(canonical[cut + len("tests/test_utils.py") :])
    s.turn([sys, user], a0, "tool_calls", output_ids=odd, tools=TOOLS)

    t0 = {"role": "tool", "content": "FAILED tests/test_utils.py::test_add - assert add(2, 2) == 4"}
    a1 = {
        "role": "assistant",
        "reasoning_content": "The sum is wrong. Ask a sub-agent where add is defined.",
        "content": "",
        "tool_calls": [call("spawn_agent", task="Find where add is defined")],
    }
    s.turn([sys, user, a0, t0], a1, "tool_calls", tools=TOOLS)

    sub = [
        {"role": "system", "content": SUB_SYSTEM},
        {"role": "user", "content": "Find where add is defined"},
    ]
    s.turn(sub, {"role": "assistant", "content": "src/utils.py:12"}, "stop")

    t1 = {"role": "tool", "content": "src/utils.py:12"}
    a3 = {
        "role": "assistant",
        "reasoning_content": "Read the file.",
        "content": "",
        "tool_calls": [call("read_file", path="src/utils.py")],
    }
    s.turn([sys, user, a0, t0, a1, t1], a3, "tool_calls", tools=TOOLS)

    t3 = {"role": "tool", "content": "def add(a, b):\n\treturn a - b\n"}
    nudge = {"role": "user", "content": "Keep the fix minimal."}
    prompt4 = [sys, user, a0, t0, a1, t1, a3, t3, nudge]
    s.turn(prompt4, {"role": "assistant", "content": "The bug is in add: it subtracts."}, "length", tools=TOOLS)
    # The harness retries the truncated turn with the same prompt.
    a5 = {
        "role": "assistant",
        "reasoning_content": "One character: - becomes +.",
        "content": "Fixed: add now returns a + b.",
    }
    s.turn(prompt4, a5, "stop", tools=TOOLS)
    return s


def rewrite_session(tok: Tokenizer) -> Session:
    s = Session(tok, "s-7f9c-rewrite")
    sys = {"role": "system", "content": SYSTEM}
    user = {"role": "user", "content": "Say hi, then list the files."}
    s.turn([sys, user], {"role": "assistant", "content": "Hi! How can I help you today?"}, "stop")
    # The harness keeps a shortened version of the reply in its history.
    short = {"role": "assistant", "content": "Hi!"}
    again = {"role": "user", "content": "List the files."}
    s.turn(
        [sys, user, short, again],
        {"role": "assistant", "content": "", "tool_calls": [call("ls")]},
        "tool_calls",
    )
    return s


def empty_session(tok: Tokenizer) -> Session:
    s = Session(tok, "s-81d0-empty")
    s.turn([{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello?"}], None, "abort")
    s.turn([], None, "abort")
    return s


def bad_session(tok: Tokenizer) -> Session:
    s = Session(tok, "s-9e44-bad")
    msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Hello?"}]
    s.turn(msgs, {"role": "assistant", "content": "Hello."}, "stop", logprobs="short")
    return s


def training_texts() -> list[str]:
    """Text the toy tokenizer learns its merges from: the scenario's own wording."""
    words = [SYSTEM, SUB_SYSTEM, "<think>\n", "\n</think>\n\n", "<tool_call>\n", "\n</tool_call>"]
    words += ["The test test_add fails. Please fix it.", "Run the failing test first to see the error."]
    words += ['{"name": "run_tests", "arguments": {"path": "tests/test_utils.py"}}']
    words += [
        "FAILED tests/test_utils.py::test_add - assert add(2, 2) == 4",
        "def add(a, b):\n\treturn a + b\n",
    ]
    words += ["system\n", "user\n", "assistant\n", "tool\n", "src/utils.py:12", "Keep the fix minimal."]
    return words * 20


def main() -> None:
    tok = build_tokenizer(training_texts())
    TOKENIZER_DIR.mkdir(exist_ok=True)
    from transformers import PreTrainedTokenizerFast

    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(str(TOKENIZER_DIR))
    # transformers 5 writes its own class name; the 4.x name loads in both.
    config_path = TOKENIZER_DIR / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": config["eos_token"]}
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")

    sessions = [main_session(tok), rewrite_session(tok), empty_session(tok), bad_session(tok)]
    SCENARIO_DIR.mkdir(exist_ok=True)
    with (SCENARIO_DIR / "turns.jsonl").open("w", encoding="utf-8") as f:
        for s in sessions:
            for t in s.turns:
                f.write(json.dumps(t, ensure_ascii=False, sort_keys=True) + "\n")
    rewards = {"s-7f3a-fix-tests": 1.0, "s-7f9c-rewrite": 0.5, "s-9e44-bad": 0.0}
    with (SCENARIO_DIR / "sessions.jsonl").open("w", encoding="utf-8") as f:
        for i, (sid, reward) in enumerate(sorted(rewards.items())):
            f.write(json.dumps({"session_id": sid, "reward": reward, "index": i, "group_index": 0}) + "\n")


if __name__ == "__main__":
    main()
