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

Sub-agents (an observation result's ``subagent_trajectory_ref`` list) are
part of the parent's session: their agent steps become turns of the parent,
recorded right after the step whose tool call delegated to them, with their
own projected messages, so the routing tree makes them branches of the
parent and they share its reward.  A reference is resolved by
``trajectory_id`` among the document's (or the root's) embedded
``subagent_trajectories`` (ATIF v1.7), by ``trajectory_path`` relative to
the referring file, or, the form before v1.7, by ``session_id`` among the
trajectories imported with it; a trajectory referred to by another is not
imported as a session of its own.  Each sub-agent turn's metadata names it
(``subagent``: the reference's id or path).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
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
        files: list[Path] = []
        for source in sources:
            found = sorted(source.rglob("*.json")) if source.is_dir() else [source]
            if not found:
                raise SourceError("no .json trajectory under this folder", file=source)
            files.extend(found)
        # First pass: which files are sub-agents of others (imported inside their parent, not alone).
        index = _Index()
        for path in files:
            index.add(path, read_json_file(path))
        for path in files:
            if path.resolve() not in index.referred:
                yield _trajectory(read_json_file(path), SourceRef(str(path)), index)


def _refs(doc: Any) -> Iterator[dict[str, Any]]:
    """The sub-agent references of a document's steps, in step order."""
    steps = doc.get("steps") if isinstance(doc, dict) else None
    for step in steps if isinstance(steps, list) else []:
        results = ((step.get("observation") or {}).get("results") or []) if isinstance(step, dict) else []
        for result in results if isinstance(results, list) else []:
            refs = result.get("subagent_trajectory_ref") if isinstance(result, dict) else None
            for item in refs if isinstance(refs, list) else []:
                if isinstance(item, dict):
                    yield item


@dataclass
class _Index:
    """The imported files by session id, and the files some trajectory refers to as a sub-agent."""

    by_session: dict[str, Path] = field(default_factory=dict)
    referred: set[Path] = field(default_factory=set)

    def add(self, path: Path, doc: Any) -> None:
        if isinstance(doc, dict) and isinstance(doc.get("session_id"), str):
            self.by_session.setdefault(doc["session_id"], path.resolve())
        for ref in _refs(doc):
            target = self.target(ref, path)
            if target is not None:
                self.referred.add(target)

    def target(self, ref: dict[str, Any], referrer: Path) -> Path | None:
        """The file a reference names, when it names one: by path, else (before v1.7) by session id."""
        if isinstance(ref.get("trajectory_path"), str):
            return (referrer.parent / str(ref["trajectory_path"])).resolve()
        if ref.get("trajectory_id") is None and isinstance(ref.get("session_id"), str):
            return self.by_session.get(ref["session_id"])
        return None


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


def _check_steps(doc: Any, ref: SourceRef, sid: str) -> InvalidSessionError | None:
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        return reject("not an ATIF trajectory (no steps list)", ref, sid)
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
    return None


def _trajectory(doc: Any, ref: SourceRef, index: _Index) -> ImportedSession | InvalidSessionError:
    if not isinstance(doc, dict) or not isinstance(doc.get("steps"), list):
        return reject("not an ATIF trajectory (no steps list)", ref, "(no session id)")
    sid = doc.get("session_id")
    if not isinstance(sid, str) or not sid:
        return reject("the trajectory has no session_id", ref, "(no session id)")
    session = ImportedSession(sid, [], ref)
    walk = _Walk(session, index, doc)
    error = walk.trajectory(doc, ref, None, frozenset())
    if error is not None:
        return error
    if not session.turns:
        return reject("no agent step has token ids (ATIF before v1.4, or the agent did not record them)", ref, sid)
    if walk.without_ids:
        session.note("agent steps without token ids: kept as context only (no turn)")
    session.note("finish_reason: not in ATIF: recorded as 'stop'")
    session.note("tools: ATIF keeps no tool schema: recorded as none")
    session.note("prompt messages: projected from the steps, not the literal request")
    return session


@dataclass
class _Walk:
    """One session's trajectories, the parent's and its sub-agents', turned into turns in the order they ran."""

    session: ImportedSession
    index: _Index
    root: dict[str, Any]
    without_ids: int = 0

    def trajectory(
        self, doc: Any, ref: SourceRef, subagent: str | None, within: frozenset[str]
    ) -> InvalidSessionError | None:
        sid = self.session.session_id
        error = _check_steps(doc, ref, sid)
        if error is not None:
            return error
        messages: list[dict[str, Any]] = []
        for step in sorted(doc["steps"], key=lambda s: s["step_id"]):
            message, tool_messages = step_messages(step)
            if step["source"] == "agent":
                error = self.agent_step(step, message, messages, ref, subagent)
                if error is not None:
                    return error
            messages.append(message)
            messages.extend(tool_messages)
            for result in (step.get("observation") or {}).get("results") or []:
                refs = result.get("subagent_trajectory_ref") if isinstance(result, dict) else None
                for item in refs if isinstance(refs, list) else []:
                    error = self.subagent(item, doc, ref, within)
                    if error is not None:
                        return error
        return None

    def agent_step(
        self,
        step: dict[str, Any],
        message: dict[str, Any],
        messages: list[dict[str, Any]],
        ref: SourceRef,
        subagent: str | None,
    ) -> InvalidSessionError | None:
        metrics = step.get("metrics") or {}
        prompt = metrics.get("prompt_token_ids")
        output = metrics.get("completion_token_ids")
        where = SourceRef(ref.file, step["step_id"], "step")
        if output is not None and prompt is None:
            return reject(
                "completion_token_ids without prompt_token_ids (ATIF v1.3 keeps no prompt ids)",
                where,
                self.session.session_id,
            )
        if prompt is None:
            self.without_ids += 1
            return None
        logprobs = metrics.get("logprobs")
        if logprobs is None:
            self.session.note("output_logprobs: not in the step's metrics: recorded as none")
        metadata: dict[str, Any] = {"step_id": step["step_id"]}
        if step.get("model_name"):
            metadata["model_name"] = step["model_name"]
        if subagent is not None:
            metadata["subagent"] = subagent
        self.session.turns.append(
            ImportedTurn(
                prompt_ids=prompt,
                output_ids=output if output is not None else [],
                output_logprobs=logprobs,
                finish_reason="stop",
                prompt_messages=list(messages),
                response_message=message,
                source=where,
                metadata=metadata,
                timestamp=iso_timestamp(step.get("timestamp")),
            )
        )
        return None

    def subagent(
        self, item: Any, doc: dict[str, Any], ref: SourceRef, within: frozenset[str]
    ) -> InvalidSessionError | None:
        """The referenced sub-agent's turns, after the step that delegated to it (nothing when not found)."""
        if not isinstance(item, dict):
            return None
        sid = self.session.session_id
        child: Any = None
        child_ref = ref
        name: str | None = None
        if item.get("trajectory_id") is not None:
            name = str(item["trajectory_id"])
            for holder in (doc, self.root):
                embedded = holder.get("subagent_trajectories")
                for candidate in embedded if isinstance(embedded, list) else []:
                    if isinstance(candidate, dict) and candidate.get("trajectory_id") == item["trajectory_id"]:
                        child = candidate
                        break
                if child is not None:
                    break
        else:
            path = self.index.target(item, Path(ref.file))
            name = item.get("trajectory_path") or item.get("session_id")
            if path is not None and path.is_file():
                try:
                    child = read_json_file(path)
                except SourceError as exc:
                    return reject(f"sub-agent trajectory {name}: {exc}", ref, sid)
                child_ref = SourceRef(str(path))
        if child is None:
            self.session.note(f"sub-agent trajectory not found ({name}): its calls are not imported")
            return None
        key = f"{child_ref.file}#{name}"
        if key in within:
            return reject(f"sub-agent trajectory {name} refers back to itself", ref, sid)
        return self.trajectory(child, child_ref, str(name), within | {key})
