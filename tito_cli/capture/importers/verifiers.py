"""``verifiers``: PrimeIntellect verifiers v1 ``traces.jsonl`` episodes (also prime-rl's rollout dumps).

An episode line holds ``traces``; each trace is a message graph: ``nodes``
(``parent`` index, ``message``, ``token_ids`` = the node's delta of template
scaffold and its own tokens, ``mask`` true on sampled tokens, ``logprobs`` one
per true mask entry) and ``calls`` (``node`` = the assistant node a call
produced, ``finish_reason``).  Per call: prompt ids = the ancestors' deltas +
the node's tokens before its sampled part; output ids = the sampled part.
Tokens after the sampled part (the template's end-of-turn) belong to the next
prompt, as they do in the ancestors' deltas.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...errors import InvalidSessionError, SourceError
from .base import ImportedSession, ImportedTurn, Importer, SessionOutcome, SourceRef, read_json_lines, reject

__all__ = ["VerifiersImporter", "trace_reward"]


class VerifiersImporter(Importer):
    name = "verifiers"
    summary = "verifiers v1 traces.jsonl episodes (message graph with token deltas, masks, logprobs)."
    sources_hint = "traces.jsonl file (or a folder searched for traces.jsonl)"

    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        self.check_sources(sources)
        for source in sources:
            files = sorted(source.rglob("traces.jsonl")) if source.is_dir() else [source]
            if not files:
                raise SourceError("no traces.jsonl under this folder", file=source)
            for path in files:
                for number, episode in read_json_lines(path):
                    ref = SourceRef(str(path), number)
                    if isinstance(episode, SourceError):
                        yield reject(episode.message, ref, f"(line {number})")
                        continue
                    yield from _episode(episode, ref)


def _episode(episode: Any, ref: SourceRef) -> Iterator[ImportedSession | InvalidSessionError]:
    if not isinstance(episode, dict) or not isinstance(episode.get("traces"), list):
        yield reject("not a verifiers episode (no traces list)", ref, f"(line {ref.row})")
        return
    context = {key: episode[key] for key in ("id", "env", "group", "run") if episode.get(key) is not None}
    for position, trace in enumerate(episode["traces"]):
        sid = trace.get("id") if isinstance(trace, dict) else None
        if not isinstance(sid, str) or not sid:
            yield reject(f"trace {position} has no id", ref, f"(line {ref.row}, trace {position})")
            continue
        yield _trace(trace, sid, ref, context)


def trace_reward(rewards: Any) -> float | None:
    """The weighted sum of a trace's reward components (null components are skipped).

    ``ValueError`` naming the component when a score or weight, or the sum, is beyond float range
    (``1e400`` reads as infinity; an integer of 400 digits has no float).
    """
    if not isinstance(rewards, dict):
        return None
    total, seen = 0.0, False
    for name, component in rewards.items():
        if isinstance(component, dict) and _number(component.get("score")):
            weight = component.get("weight", 1.0)
            try:
                term = float(component["score"]) * (float(weight) if _number(weight) else 1.0)
            except OverflowError:
                term = math.inf
            if not math.isfinite(term):
                raise ValueError(f"reward component {name!r}: score × weight is beyond float range")
            total += term
            seen = True
    if not math.isfinite(total):
        raise ValueError("the reward components sum beyond float range")
    return total if seen else None


def _number(value: Any) -> bool:
    return isinstance(value, (int, float))


def _trace(
    trace: dict[str, Any], sid: str, ref: SourceRef, context: dict[str, Any]
) -> ImportedSession | InvalidSessionError:
    nodes = trace.get("nodes")
    calls = trace.get("calls")
    if not isinstance(nodes, list) or not isinstance(calls, list):
        return reject("the trace has no nodes or calls list", ref, sid)
    session = ImportedSession(sid, [], ref)
    tools = trace.get("tools")
    for number, call in enumerate(calls):
        index = call.get("node") if isinstance(call, dict) else None
        if type(index) is not int or not 0 <= index < len(nodes):
            return reject(f"call {number}: node {index!r} is not a node of the trace", ref, sid)
        path = _path_to(nodes, index)
        if isinstance(path, str):
            return reject(f"call {number}: {path}", ref, sid)
        node = nodes[index]
        if any(not isinstance(nodes[i].get("token_ids"), list) for i in path):
            return reject(
                f"call {number}: no token ids (an eval-client trace relays provider JSON without tokens)", ref, sid
            )
        mask = node.get("mask")
        ids = node["token_ids"]
        if not isinstance(mask, list) or len(mask) != len(ids):
            return reject(
                f"call {number}: length mismatch: mask has {_len(mask)} entries for {len(ids)} token ids", ref, sid
            )
        if any(type(m) not in (bool, int) or m not in (0, 1) for m in mask):
            bad = next(m for m in mask if type(m) not in (bool, int) or m not in (0, 1))
            return reject(f"call {number}: mask entry {bad!r} is not true/false (or 1/0)", ref, sid)
        # 1/0 as verifiers' true/false: read only the booleans, a mask of integers would import empty outputs.
        sampled = [i for i, m in enumerate(mask) if m == 1]
        if sampled and sampled != list(range(sampled[0], sampled[-1] + 1)):
            return reject(f"call {number}: the sampled tokens of node {index} are not contiguous", ref, sid)
        start = sampled[0] if sampled else len(ids)
        end = sampled[-1] + 1 if sampled else len(ids)
        prompt = [t for i in path[:-1] for t in nodes[i]["token_ids"]] + ids[:start]
        logprobs = node.get("logprobs")
        if logprobs is None:
            session.note("output_logprobs: not in the trace: recorded as none")
        finish = call.get("finish_reason")
        if not isinstance(finish, str) or not finish:
            session.note("finish_reason: not in the call: recorded as 'stop'")
            finish = "stop"
        meta = {key: call[key] for key in ("model", "usage") if call.get(key) is not None}
        session.turns.append(
            ImportedTurn(
                prompt_ids=prompt,
                output_ids=ids[start:end],
                output_logprobs=logprobs,
                finish_reason=finish,
                prompt_messages=[nodes[i].get("message") for i in path[:-1]],
                response_message=node.get("message"),
                source=ref,
                tools=tools,
                metadata=meta or None,
            )
        )
    if tools is not None and len(calls) > 1:
        session.note("tools: the trace keeps only the last turn's tool list: recorded on every turn")
    try:
        reward = trace_reward(trace.get("rewards"))
    except ValueError as exc:
        return reject(f"unusable reward: {exc}", ref, sid)
    if reward is None:
        session.note("reward: the trace has no scored reward: sessions row with reward null")
    metadata: dict[str, Any] = {"verifiers": {**context, "rewards": trace.get("rewards")}}
    session.outcome = SessionOutcome(reward=reward, metadata=metadata, source=ref)
    return session


def _path_to(nodes: list[Any], index: int) -> list[int] | str:
    """Node indices from the root to ``index``; a reason string for a broken parent link."""
    path: list[int] = []
    current: Any = index
    while current is not None:
        if type(current) is not int or not 0 <= current < len(nodes) or not isinstance(nodes[current], dict):
            return f"broken parent chain: node {current!r} is not a node of the trace"
        if current in path:
            return f"broken parent chain: a cycle through node {current}"
        path.append(current)
        current = nodes[current].get("parent")
    return path[::-1]


def _len(value: Any) -> int | str:
    return len(value) if isinstance(value, list) else "no"
