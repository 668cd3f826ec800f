"""Write the import fixtures: the same agent sessions in each capture format's documented schema.

Run from the repository root (``python -m tests.import_sources.make``); it
rewrites the files byte for byte.  The sessions are tokenized with the fixture
tokenizer, one message at a time in its ChatML layout, and the ground truth
(what the model saw and generated: prompt ids, output ids, logprobs, the
messages) is written to ``<format>/expected_turns.jsonl`` with the rewards in
``expected_sessions.jsonl``.  Tests rebuild the imported fixture and compare it
with the spec model's samples of that ground truth.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

HERE = Path(__file__).resolve().parent
TOKENIZER = AutoTokenizer.from_pretrained(str(HERE.parent.parent / "fixtures" / "tokenizer"))
IM_END = TOKENIZER.convert_tokens_to_ids("<|im_end|>")
SCAFFOLD = "<|im_start|>assistant\n"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


def ids(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, add_special_tokens=False))


def logprob(position: int, token: int) -> float:
    return -float(((token * 5 + position * 11) % 89) + 1) / 32.0  # float32-exact


def segment(message: dict[str, Any]) -> str:
    """The template text of a prompt message (ChatML, tool results as a user turn)."""
    content = message.get("content") or ""
    if message["role"] == "tool":
        return f"<|im_start|>user\n<tool_response>\n{content}\n</tool_response><|im_end|>\n"
    return f"<|im_start|>{message['role']}\n{content}<|im_end|>\n"


def output_text(reply: dict[str, Any]) -> str:
    text = reply.get("content") or ""
    for call in reply.get("tool_calls") or []:
        f = call["function"]
        text += (
            "\n" if text else ""
        ) + f'<tool_call>\n{{"name": "{f["name"]}", "arguments": {f["arguments"]}}}\n</tool_call>'
    return text


class Conversation:
    """One session: its messages and, per assistant turn, the tokens the model saw and produced."""

    def __init__(self, sid: str, tools: Any = None) -> None:
        self.sid, self.tools = sid, tools
        self.messages: list[dict[str, Any]] = []
        self.tokens: list[int] = []  # the running context
        self.turns: list[dict[str, Any]] = []

    def add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.tokens += ids(segment(message))

    def generate(self, reply: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        prompt = self.tokens + ids(SCAFFOLD)
        output = [*ids(output_text(reply)), IM_END]
        message = {"role": "assistant", **reply}
        turn = {
            "session_id": self.sid,
            "seq": len(self.turns),
            "prompt_ids": prompt,
            "output_ids": output,
            "output_logprobs": [logprob(i, t) for i, t in enumerate(output)],
            "finish_reason": finish or ("tool_calls" if reply.get("tool_calls") else "stop"),
            "prompt_messages": list(self.messages),
            "response_message": message,
            "tools": self.tools,
        }
        self.turns.append(turn)
        self.messages.append(message)
        self.tokens = prompt + output + ids("\n")
        return turn


def tool_session(sid: str) -> Conversation:
    c = Conversation(sid, TOOLS)
    c.add({"role": "system", "content": "You are a coding agent."})
    c.add({"role": "user", "content": "What does setup.cfg say about flake8?"})
    call = {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "setup.cfg"}'}}
    c.generate({"content": None, "tool_calls": [call]})
    c.add({"role": "tool", "tool_call_id": "call_a", "content": "[flake8]\nmax-line-length = 100"})
    c.generate({"content": "It sets max-line-length to 100."})
    return c


def chat_session(sid: str) -> Conversation:
    c = Conversation(sid)
    c.add({"role": "user", "content": "Name a prime number."})
    c.generate({"content": "Seven."})
    c.add({"role": "user", "content": "And a larger one?"})
    c.generate({"content": "Thirteen."})
    return c


def write_jsonl(path: Path, rows: list[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def write_truth(folder: Path, conversations: list[Conversation], rewards: dict[str, float]) -> None:
    write_jsonl(folder / "expected_turns.jsonl", [t for c in conversations for t in c.turns])
    write_jsonl(folder / "expected_sessions.jsonl", [{"session_id": s, "reward": r} for s, r in rewards.items()])


def vllm_content(turn: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"token": TOKENIZER.convert_ids_to_tokens(t), "logprob": lp, "bytes": None, "top_logprobs": []}
        for t, lp in zip(turn["output_ids"], turn["output_logprobs"], strict=True)
    ]


def openai_exchanges() -> None:
    folder = HERE / "openai-exchanges"
    vllm, streamed, sglang = tool_session("vllm-tools"), chat_session("streamed-chat"), chat_session("sglang-chat")
    lines: list[dict[str, Any]] = []
    # Interleaved as a gateway logs concurrent sessions.
    order = [(vllm, 0), (streamed, 0), (sglang, 0), (vllm, 1), (sglang, 1), (streamed, 1)]
    for conv, k in order:
        turn = conv.turns[k]
        request = {"model": "fixture", "messages": turn["prompt_messages"], "logprobs": True, "return_token_ids": True}
        if conv.tools:
            request["tools"] = conv.tools
        stamp = f"2026-08-01T12:00:{len(lines):02d}Z"
        message = {
            **turn["response_message"],
            "refusal": None,
            "tool_calls": turn["response_message"].get("tool_calls") or [],
        }
        # The harness sends a message back without the server's null fields: the import aligns the
        # response to that, so the ground truth keeps the server's form only for a session's last turn.
        last_turn = k == len(conv.turns) - 1
        if conv is vllm:
            if last_turn:
                turn["response_message"] = message
            response = {
                "id": f"chatcmpl-{len(lines)}",
                "object": "chat.completion",
                "model": "fixture",
                "prompt_token_ids": turn["prompt_ids"],
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "logprobs": {"content": vllm_content(turn)},
                        "finish_reason": turn["finish_reason"],
                        "stop_reason": None,
                        "token_ids": turn["output_ids"],
                    }
                ],
                "usage": {"prompt_tokens": len(turn["prompt_ids"]), "completion_tokens": len(turn["output_ids"])},
            }
            lines.append({"session_id": conv.sid, "timestamp": stamp, "request": request, "response": response})
        elif conv is sglang:
            if last_turn:
                turn["response_message"] = message
            logprobs = [
                [lp, t, TOKENIZER.decode([t])]
                for t, lp in zip(turn["output_ids"], turn["output_logprobs"], strict=True)
            ]
            response = {
                "id": f"sglang-{len(lines)}",
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": turn["finish_reason"],
                        "prompt_token_ids": turn["prompt_ids"],
                        "token_ids": turn["output_ids"],
                        "meta_info": {"output_token_logprobs": logprobs},
                    }
                ],
            }
            headers = {"Content-Type": "application/json", "X-Session-Id": conv.sid}
            lines.append({"headers": headers, "timestamp": stamp, "request": request, "response": response})
        else:
            request["stream"] = True
            content = vllm_content(turn)
            chunks: list[dict[str, Any]] = [
                {
                    "object": "chat.completion.chunk",
                    "prompt_token_ids": turn["prompt_ids"],
                    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}],
                }
            ]
            for i, token in enumerate(turn["output_ids"]):
                last = i == len(turn["output_ids"]) - 1
                delta = {"content": "" if last else TOKENIZER.decode([token])}
                chunks.append(
                    {
                        "object": "chat.completion.chunk",
                        "choices": [
                            {
                                "index": 0,
                                "delta": delta,
                                "logprobs": {"content": [content[i]]},
                                "finish_reason": turn["finish_reason"] if last else None,
                                "token_ids": [token],
                            }
                        ],
                    }
                )
            path = f"/sessions/{conv.sid}/v1/chat/completions"
            lines.append({"path": path, "timestamp": stamp, "request": request, "chunks": chunks})
    write_jsonl(folder / "exchanges.jsonl", lines)
    rewards = {"vllm-tools": 1.0, "streamed-chat": 0.25, "sglang-chat": -0.5}
    write_jsonl(folder / "rewards.jsonl", [{"session_id": s, "reward": r} for s, r in rewards.items()])
    write_truth(folder, [vllm, streamed, sglang], rewards)


def verifiers() -> None:
    folder = HERE / "verifiers"
    conversations = [tool_session("vf-trace-tools"), chat_session("vf-trace-chat")]
    rewards = {"vf-trace-tools": 1.0 * 1.0 + 0.5 * 0.2, "vf-trace-chat": 0.0}
    episodes = []
    for number, conv in enumerate(conversations):
        nodes: list[dict[str, Any]] = []
        calls = []
        assistant_turns = iter(conv.turns)
        for message in conv.messages:
            parent = len(nodes) - 1 if nodes else None
            if message["role"] == "assistant":
                turn = next(assistant_turns)
                scaffold, output, tail = ids(SCAFFOLD), turn["output_ids"], ids("\n")
                node_message = {"role": "assistant", "content": message.get("content"), "reasoning_content": None}
                if message.get("tool_calls"):
                    node_message["tool_calls"] = [
                        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                        for c in message["tool_calls"]
                    ]
                nodes.append(
                    {
                        "parent": parent,
                        "message": node_message,
                        "sampled": True,
                        "token_ids": scaffold + output + tail,
                        "mask": [False] * len(scaffold) + [True] * len(output) + [False] * len(tail),
                        "is_content": [False] * len(scaffold) + [True] * len(output) + [False] * len(tail),
                        "logprobs": turn["output_logprobs"],
                    }
                )
                calls.append(
                    {"node": len(nodes) - 1, "finish_reason": turn["finish_reason"], "model": "fixture", "time": 0.1}
                )
            else:
                nodes.append(
                    {
                        "parent": parent,
                        "message": message,
                        "sampled": False,
                        "token_ids": ids(segment(message)),
                        "mask": None,
                    }
                )
                nodes[-1]["mask"] = [False] * len(nodes[-1]["token_ids"])
        # The ground truth in the trace's own message shapes (the importer keeps messages verbatim).
        by_call = iter(calls)
        for turn in conv.turns:
            node = next(by_call)["node"]
            chain, current = [], nodes[node]["parent"]
            while current is not None:
                chain.append(nodes[current]["message"])
                current = nodes[current]["parent"]
            turn["prompt_messages"] = chain[::-1]
            turn["response_message"] = nodes[node]["message"]
        score = {"correct": {"score": 1.0, "weight": 1.0}, "format": {"score": 0.5, "weight": 0.2}}
        trace = {
            "version": 1,
            "id": conv.sid,
            "agent": {"name": "fixture-agent", "trainable": True},
            "tools": conv.tools or [],
            "nodes": nodes,
            "calls": calls,
            "rewards": score if number == 0 else {"correct": {"score": 0.0, "weight": 1.0}, "judge": None},
            "metrics": {},
            "is_completed": True,
            "stop_condition": "no_tools_called",
            "errors": [],
        }
        for turn in conv.turns:
            turn["tools"] = conv.tools or []
        episodes.append(
            {
                "id": f"episode-{number}",
                "env": {"id": "env-1", "name": "fixture-env"},
                "task": {"prompt": conv.messages[0]["content"]},
                "group": {"id": "group-0"},
                "run": {"type": "train"},
                "ok": True,
                "errors": [],
                "traces": [trace],
            }
        )
    write_jsonl(folder / "rollouts" / "step_3" / "traces.jsonl", episodes)
    write_truth(folder, conversations, rewards)


def atif() -> None:
    folder = HERE / "atif"
    conversations = [tool_session("atif-tools"), chat_session("atif-chat")]
    for conv in conversations:
        steps: list[dict[str, Any]] = []
        turns = iter(conv.turns)
        pending: dict[str, Any] | None = None
        for message in conv.messages:
            if message["role"] in ("system", "user"):
                source = "system" if message["role"] == "system" else "user"
                steps.append({"step_id": len(steps) + 1, "source": source, "message": message["content"]})
            elif message["role"] == "assistant":
                turn = next(turns)
                step: dict[str, Any] = {
                    "step_id": len(steps) + 1,
                    "timestamp": f"2026-08-01T12:0{len(steps)}:00Z",
                    "source": "agent",
                    "model_name": "fixture",
                    "message": message.get("content") or "",
                    "metrics": {
                        "prompt_tokens": len(turn["prompt_ids"]),
                        "completion_tokens": len(turn["output_ids"]),
                        "prompt_token_ids": turn["prompt_ids"],
                        "completion_token_ids": turn["output_ids"],
                        "logprobs": turn["output_logprobs"],
                    },
                }
                if message.get("tool_calls"):
                    step["tool_calls"] = [
                        {
                            "tool_call_id": c["id"],
                            "function_name": c["function"]["name"],
                            "arguments": json.loads(c["function"]["arguments"]),
                        }
                        for c in message["tool_calls"]
                    ]
                steps.append(step)
                pending = step
            elif message["role"] == "tool":
                assert pending is not None
                pending["observation"] = {
                    "results": [{"source_call_id": message["tool_call_id"], "content": message["content"]}]
                }
        # The ground truth as ATIF projects it: content "" for an empty agent message, arguments re-serialised.
        projected: list[dict[str, Any]] = []
        turns = iter(conv.turns)
        for message in conv.messages:
            if message["role"] == "assistant":
                turn = next(turns)
                shaped = {"role": "assistant", "content": message.get("content") or ""}
                if message.get("tool_calls"):
                    shaped["tool_calls"] = [
                        {
                            **c,
                            "function": {
                                **c["function"],
                                "arguments": json.dumps(json.loads(c["function"]["arguments"])),
                            },
                        }
                        for c in message["tool_calls"]
                    ]
                turn["prompt_messages"] = list(projected)
                turn["response_message"] = shaped
                turn["finish_reason"] = "stop"
                turn["tools"] = None
                projected.append(shaped)
            else:
                projected.append({k: v for k, v in message.items() if k in ("role", "content", "tool_call_id")})
        trajectory = {
            "schema_version": "ATIF-v1.4",
            "session_id": conv.sid,
            "agent": {"name": "fixture-agent", "version": "1.0.0", "model_name": "fixture"},
            "steps": steps,
            "final_metrics": {"total_steps": len(steps)},
        }
        path = folder / "trajectories" / f"{conv.sid}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(trajectory, indent=2) + "\n", encoding="utf-8")
    rewards = {"atif-tools": 1.0, "atif-chat": 0.5}
    write_jsonl(folder / "rewards.jsonl", [{"session_id": s, "reward": r} for s, r in rewards.items()])
    write_truth(folder, conversations, rewards)


def nemo_gym() -> None:
    folder = HERE / "nemo-gym"
    chat, responses = tool_session("rollout-chat-0"), chat_session("rollout-responses-1")
    capture = folder / "capture"
    rng = random.Random(7)
    for conv, dialect in ((chat, "chat"), (responses, "responses")):
        entries, exchanges = [], []
        for k, turn in enumerate(conv.turns):
            call_id = f"{conv.sid}-call-{k}"
            if dialect == "chat":
                request = {"model": "fixture", "messages": turn["prompt_messages"], "tools": conv.tools}
                response = {
                    "choices": [
                        {"index": 0, "message": turn["response_message"], "finish_reason": turn["finish_reason"]}
                    ]
                }
                output_items = [
                    {"type": "message", "role": "assistant", "content": turn["response_message"].get("content")}
                ]
            else:
                items: list[dict[str, Any]] = []
                for m in turn["prompt_messages"]:
                    if m["role"] == "assistant":
                        items.append(
                            {
                                "type": "message",
                                "role": "assistant",
                                "content": [{"type": "output_text", "text": m["content"]}],
                            }
                        )
                    else:
                        items.append({"type": "message", "role": m["role"], "content": m["content"]})
                request = {"model": "fixture", "input": items}
                output_items = [
                    {
                        "type": "message",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": turn["response_message"]["content"]}],
                    }
                ]
                response = {"id": f"resp-{k}", "object": "response", "status": "completed", "output": output_items}
                turn["tools"] = None
            exchanges.append(
                {
                    "model_call_id": call_id,
                    "dialect": dialect,
                    "started_at": 1780000000.0 + k,
                    "completed_at": 1780000000.5 + k,
                    "status_code": 200,
                    "request": request,
                    "response": response,
                }
            )
            entries.append(
                {
                    "schema_version": 3,
                    "rollout_id": conv.sid,
                    "model_call_id": call_id,
                    "model": "fixture",
                    "prompt_token_ids": turn["prompt_ids"],
                    "generation_token_ids": turn["output_ids"],
                    "generation_log_probs": turn["output_logprobs"],
                    "output_items": output_items,
                    "token_item_index": 0,
                    "created_at": 1780000000.5 + k,
                    "parent_resolution": "root" if k == 0 else "resolved",
                    "parent_call_id": None if k == 0 else f"{conv.sid}-call-{k - 1}",
                }
            )
        rng.shuffle(entries)  # entry order carries no meaning
        write_jsonl(capture / f"{conv.sid}.tokens.jsonl", entries)
        write_jsonl(capture / f"{conv.sid}.capture.jsonl", exchanges)
        (capture / f"{conv.sid}.tokens.state.json").write_text(
            json.dumps({"frozen": True, "incomplete": False, "version": len(entries)}) + "\n", encoding="utf-8"
        )
    rewards = {"rollout-chat-0": 1.0, "rollout-responses-1": 0.0}
    # NeMo Gym's rollouts rows: the task and rollout indices, and here an explicit capture id (_ng_rollout_id).
    rows = [
        {"_ng_task_index": k, "_ng_rollout_index": 0, "_ng_rollout_id": s, "reward": r}
        for k, (s, r) in enumerate(rewards.items())
    ]
    write_jsonl(folder / "rollouts.jsonl", rows)
    write_truth(folder, [chat, responses], rewards)


if __name__ == "__main__":
    openai_exchanges()
    verifiers()
    atif()
    nemo_gym()
