"""``atif``: Harbor's Agent Trajectory Interchange Format files (v1.4 and later carry token ids).

One trajectory per JSON file: ``session_id`` and ``steps`` (``step_id`` from 1;
``source`` system, user or agent; ``message``; an agent step's
``reasoning_content``, ``tool_calls`` [{tool_call_id, function_name,
arguments}], ``observation.results`` [{source_call_id, content}] and
``metrics`` {prompt_token_ids, completion_token_ids, logprobs}).  The chat
messages are projected from the steps (ATIF keeps no literal request): a
system or user step is one message, an agent step is an assistant message
followed by one tool message per observation result.  Each agent step with
token ids is a turn whose prompt messages are everything projected before it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...errors import InvalidSessionError, SourceError
from .base import ImportedSession, ImportedTurn, Importer, SourceRef, iso_timestamp, read_json_file, reject

__all__ = ["AtifImporter", "step_messages"]

_ROLES = {"system": "system", "user": "user", "agent": "assistant"}


class AtifImporter(Importer):
    name = "atif"
    summary = "Agent Trajectory Interchange Format (ATIF v1.4+) trajectory JSON files."
    sources_hint = "ATIF trajectory .json file (or a folder searched for *.json)"

    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        self.check_sources(sources)
        for source in sources:
            files = sorted(source.rglob("*.json")) if source.is_dir() else [source]
            if not files:
                raise SourceError("no .json trajectory under this folder", file=source)
            for path in files:
                yield _trajectory(read_json_file(path), SourceRef(str(path)))


def step_messages(step: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A step as its chat message, plus the tool messages of its observation results."""
    role = _ROLES[step["source"]]
    message: dict[str, Any] = {"role": role, "content": step.get("message", "")}
    if role == "assistant":
        if step.get("reasoning_content") is not None:
            message["reasoning_content"] = step["reasoning_content"]
        calls = step.get("tool_calls")
        if calls:
            message["tool_calls"] = [
                {
                    "id": call.get("tool_call_id"),
                    "type": "function",
                    "function": {
                        "name": call.get("function_name"),
                        # OpenAI's wire form: arguments are a JSON string (ATIF keeps an object).
                        "arguments": json.dumps(call.get("arguments", {}), ensure_ascii=False),
                    },
                }
                for call in calls
                if isinstance(call, dict)
            ]
    results = (step.get("observation") or {}).get("results") or []
    tools = [
        {"role": "tool", "tool_call_id": r.get("source_call_id"), "content": r.get("content")}
        for r in results
        if isinstance(r, dict)
    ]
    return message, tools


def _trajectory(doc: Any, ref: SourceRef) -> ImportedSession | InvalidSessionError:
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        return reject("not an ATIF trajectory (no steps list)", ref, "(no session id)")
    sid = doc.get("session_id")
    if not isinstance(sid, str) or not sid:
        return reject("the trajectory has no session_id", ref, "(no session id)")
    steps = doc["steps"]
    for position, step in enumerate(steps):
        if not isinstance(step, dict) or step.get("source") not in _ROLES or type(step.get("step_id")) is not int:
            return reject(f"step {position}: needs an integer step_id and a source of system, user or agent", ref, sid)
    seen: dict[int, int] = {}
    for position, step in enumerate(steps):
        if step["step_id"] in seen:
            # Which comes first is unknowable: sorting would pick an order silently.
            return reject(
                f"step {position}: step_id {step['step_id']} is also step {seen[step['step_id']]}'s", ref, sid
            )
        seen[step["step_id"]] = position
    session = ImportedSession(sid, [], ref)
    messages: list[dict[str, Any]] = []
    without_ids = 0
    for step in sorted(steps, key=lambda s: s["step_id"]):
        message, tool_messages = step_messages(step)
        metrics = step.get("metrics") or {}
        if step["source"] == "agent":
            prompt = metrics.get("prompt_token_ids")
            output = metrics.get("completion_token_ids")
            if output is not None and prompt is None:
                return reject(
                    "completion_token_ids without prompt_token_ids (ATIF v1.3 keeps no prompt ids)",
                    SourceRef(ref.file, step["step_id"], "step"),
                    sid,
                )
            if prompt is None:
                without_ids += 1
            else:
                logprobs = metrics.get("logprobs")
                if logprobs is None:
                    session.note("output_logprobs: not in the step's metrics: recorded as none")
                session.turns.append(
                    ImportedTurn(
                        prompt_ids=prompt,
                        output_ids=output if output is not None else [],
                        output_logprobs=logprobs,
                        finish_reason="stop",
                        prompt_messages=list(messages),
                        response_message=message,
                        source=SourceRef(ref.file, step["step_id"], "step"),
                        metadata={
                            "step_id": step["step_id"],
                            **({"model_name": step["model_name"]} if step.get("model_name") else {}),
                        },
                        timestamp=iso_timestamp(step.get("timestamp")),
                    )
                )
        messages.append(message)
        messages.extend(tool_messages)
    if not session.turns:
        return reject("no agent step has token ids (ATIF before v1.4, or the agent did not record them)", ref, sid)
    if without_ids:
        session.note("agent steps without token ids: kept as context only (no turn)")
    session.note("finish_reason: not in ATIF: recorded as 'stop'")
    session.note("tools: ATIF keeps no tool schema: recorded as none")
    session.note("prompt messages: projected from the steps, not the literal request")
    return session
