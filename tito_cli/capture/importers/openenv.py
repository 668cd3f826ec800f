"""``openenv``: OpenEnv's capture documents (``openenv/core/harness/capture/export.py``), one rollout a line.

OpenEnv's capture proxy links a rollout's model calls by token prefix into a
graph and exports one JSON document per rollout: ``session_id``, ``turns``
(every call in arrival order: ``node_id``, ``index``, ``n_prompt``,
``n_sampled``, ``sampled_logprobs``, ``finish_reason``, ``discarded``, and
with ``include_messages`` its ``request_messages``, ``request_tools`` and
``response_message``) and ``sequences`` (one row per root-to-leaf path:
``node_ids``, ``input_ids``, ``role`` agent, auxiliary or discarded).  A call's
ids are not stored with it: along a path each call's prompt is the row's
first ``n_prompt`` ids and its output the ``n_sampled`` after them (OpenEnv
links a call to the one whose prompt and output prefix its prompt), so they
are read from any row holding the call, and must agree where several do.
Each call becomes a turn, in arrival order; its label goes into the turn's
metadata as ``call_kind`` (``discarded`` for a retry that led nowhere,
``agent`` when an agent row holds it, else ``auxiliary``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...errors import InvalidSessionError, SourceError
from .base import ImportedSession, ImportedTurn, Importer, SourceRef, int_list, read_json_lines, reject

__all__ = ["OpenEnvImporter"]


class OpenEnvImporter(Importer):
    name = "openenv"
    summary = "OpenEnv capture documents (export_session's rollout JSON, one a line): calls and their paths."
    sources_hint = "JSON Lines file of rollout documents (or a folder searched for *.jsonl)"

    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        self.check_sources(sources)
        for source in sources:
            files = sorted(source.rglob("*.jsonl")) if source.is_dir() else [source]
            if not files:
                raise SourceError("no .jsonl of rollout documents under this folder", file=source)
            for path in files:
                for number, document in read_json_lines(path):
                    ref = SourceRef(str(path), number)
                    if isinstance(document, SourceError):
                        yield reject(document.message, ref, f"(line {number})")
                        continue
                    yield _rollout(document, ref)


def _call_ids(
    sequences: list[Any], calls: dict[str, dict[str, Any]], ref: SourceRef, sid: str
) -> tuple[dict[str, tuple[list[int], list[int]]], set[str]] | InvalidSessionError:
    """Each call's prompt and output ids from the rows holding it, and the calls some agent row holds."""
    found: dict[str, tuple[list[int], list[int]]] = {}
    agent: set[str] = set()
    for position, row in enumerate(sequences):
        ids = int_list(row.get("input_ids")) if isinstance(row, dict) else None
        nodes = row.get("node_ids") if isinstance(row, dict) else None
        if ids is None or not isinstance(nodes, list):
            return reject(f"sequence {position}: needs input_ids and node_ids lists", ref, sid)
        for node_id in nodes:
            call = calls.get(node_id) if isinstance(node_id, str) else None
            if call is None:
                return reject(f"sequence {position}: node {node_id!r} is no call of the rollout's turns", ref, sid)
            n_prompt, n_sampled = call.get("n_prompt"), call.get("n_sampled")
            if type(n_prompt) is not int or type(n_sampled) is not int or n_prompt + n_sampled > len(ids):
                return reject(f"call {node_id}: n_prompt and n_sampled do not fit sequence {position}", ref, sid)
            pair = (ids[:n_prompt], ids[n_prompt : n_prompt + n_sampled])
            if found.setdefault(node_id, pair) != pair:
                return reject(f"call {node_id}: sequences {position} and an earlier one disagree on its ids", ref, sid)
            if row.get("role") == "agent":
                agent.add(node_id)
    return found, agent


def _rollout(document: Any, ref: SourceRef) -> ImportedSession | InvalidSessionError:
    if not isinstance(document, dict) or not isinstance(document.get("turns"), list):
        return reject("not an OpenEnv rollout document (no turns list)", ref, f"(line {ref.row})")
    sid = document.get("session_id")
    if not isinstance(sid, str) or not sid:
        return reject("the rollout has no session_id", ref, f"(line {ref.row})")
    if document.get("capture_level", "tokens") != "tokens":
        return reject(f"capture_level {document['capture_level']!r}: an eval rollout, no token ids", ref, sid)
    calls: dict[str, dict[str, Any]] = {}
    for position, call in enumerate(document["turns"]):
        if not isinstance(call, dict) or not isinstance(call.get("node_id"), str) or type(call.get("index")) is not int:
            return reject(f"turn {position}: needs a node_id and an integer index", ref, sid)
        if call["node_id"] in calls:
            return reject(f"turn {position}: node_id {call['node_id']} is also an earlier turn's", ref, sid)
        calls[call["node_id"]] = call
    sequences = document.get("sequences")
    found = _call_ids(sequences if isinstance(sequences, list) else [], calls, ref, sid)
    if isinstance(found, InvalidSessionError):
        return found
    ids, agent = found
    session = ImportedSession(sid, [], ref)
    for call in sorted(calls.values(), key=lambda c: c["index"]):
        node_id = call["node_id"]
        if node_id not in ids:
            # export_session leaves discarded paths out unless include_discarded: their ids are nowhere.
            session.note("calls in no exported sequence (discarded ones without include_discarded): left out")
            continue
        prompt, output = ids[node_id]
        logprobs = call.get("sampled_logprobs")
        if logprobs is None:
            session.note("output_logprobs: none recorded for a call: recorded as none")
        if "request_messages" not in call:
            session.note("prompt messages: not in the document (exported without include_messages): recorded as none")
        kind = "discarded" if call.get("discarded") else "agent" if node_id in agent else "auxiliary"
        session.turns.append(
            ImportedTurn(
                prompt_ids=prompt,
                output_ids=output,
                output_logprobs=logprobs,
                finish_reason=call.get("finish_reason") or "stop",
                prompt_messages=list(call.get("request_messages") or []),
                response_message=call.get("response_message"),
                source=ref,
                tools=call.get("request_tools"),
                metadata={"call_kind": kind, "node_id": node_id},
                # A discarded retry is neither: its call kind stays unknown (its metadata says discarded).
                call_kind=kind if kind != "discarded" else None,
            )
        )
        if not call.get("finish_reason"):
            session.note("finish_reason: none recorded for a call: recorded as 'stop'")
    if not session.turns:
        return reject("no call with token ids in any exported sequence", ref, sid)
    return session
