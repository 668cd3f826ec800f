"""``rllm``: the rLLM model gateway's SQLite trace store (``rllm-model-gateway``).

The gateway stores each proxied call as a ``TraceRecord`` serialised to JSON in
``traces.data``; ``trace_sessions`` joins traces to sessions.  A session's traces
are ordered by the record's ``timestamp`` (set when the response arrived),
then ``created_at``, then the table's insertion order: ``created_at`` is the
time of the store's write, which the gateway makes asynchronously after
answering, so two quick calls can be written in the other order.  Records are either full (``prompt_token_ids``) or,
in the gateway's proposed delta storage, links: ``prompt_delta_token_ids`` plus
``parent_trace_id``, where the full prompt is the parent's full prompt, the
parent's completion, then the delta.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ...errors import InvalidSessionError, SourceError
from .base import (
    ImportedSession,
    ImportedTurn,
    Importer,
    SourceRef,
    epoch_timestamp,
    reject,
    reported_versions,
    request_sampling,
)

__all__ = ["RllmImporter", "resolve_prompt"]

_QUERY = """
    SELECT ts.session_id, t.trace_id, t.rowid, ts.created_at
    FROM trace_sessions AS ts JOIN traces AS t ON t.trace_id = ts.trace_id
    ORDER BY ts.session_id, ts.created_at, t.rowid
"""


class RllmImporter(Importer):
    name = "rllm"
    summary = "The rLLM model gateway's SQLite trace store (traces + trace_sessions tables)."
    sources_hint = "SQLite database written by rllm-model-gateway"
    server_responses = True

    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        self.check_sources(sources)
        for path in sources:
            yield from self._database(path)

    def _database(self, path: Path) -> Iterator[ImportedSession | InvalidSessionError]:
        rows, records, duplicated, unattributed = _read_store(path)
        by_session: dict[str, list[tuple[str, int, Any]]] = {}
        for sid, trace_id, rowid, record in rows:
            by_session.setdefault(sid, []).append((trace_id, rowid, record))
        for value, rowid in unattributed:
            reason = f"trace_sessions.session_id is {value!r}, not text: its traces belong to no session"
            yield reject(reason, SourceRef(str(path), rowid, "row"), str(value))
        for sid, traces in by_session.items():
            twice = next((t for t in traces if t[0] in duplicated), None)
            if twice is not None:
                # Which of the records is the call is unknowable: the session is rejected, never guessed.
                reason = f"trace {twice[0]} appears {duplicated[twice[0]]} times in the traces table"
                yield reject(reason, SourceRef(str(path), twice[1], "row"), sid)
                continue
            yield self._session(path, sid, traces, records)

    def _session(
        self, path: Path, sid: str, traces: list[tuple[str, int, Any]], records: dict[str, tuple[int, Any]]
    ) -> ImportedSession | InvalidSessionError:
        session = ImportedSession(sid, [], SourceRef(str(path), traces[0][1], "row"))
        streamed = 0
        for trace_id, rowid, record in traces:
            ref = SourceRef(str(path), rowid, "row")
            if not isinstance(record, dict):
                return reject(f"trace {trace_id}: data is not a JSON object", ref, sid)
            prompt = resolve_prompt(trace_id, records)
            if isinstance(prompt, str):
                return reject(f"trace {trace_id}: {prompt}", ref, sid)
            output = record.get("completion_token_ids")
            if not prompt and not output:
                return reject(
                    f"trace {trace_id}: no token ids (the worker returned none: use vLLM with return_token_ids)",
                    ref,
                    sid,
                )
            logprobs = record.get("logprobs")
            if logprobs is None:
                session.note("output_logprobs: not in the trace: recorded as none")
            finish = record.get("finish_reason")
            if not isinstance(finish, str) or not finish:
                session.note("finish_reason: not in the trace: recorded as 'stop'")
                finish = "stop"
            raw_request = record.get("raw_request")
            tools = raw_request.get("tools") if isinstance(raw_request, dict) else None
            if record.get("raw_response") is None:
                streamed += 1
            metadata = {"trace_id": trace_id}
            for key in ("model", "weight_version"):
                if record.get(key):
                    metadata[key] = record[key]
            raw_response = record.get("raw_response")
            answer_meta = raw_response.get("metadata") if isinstance(raw_response, dict) else None
            session.turns.append(
                ImportedTurn(
                    prompt_ids=prompt,
                    output_ids=output if output is not None else [],
                    output_logprobs=logprobs,
                    finish_reason=finish,
                    prompt_messages=record.get("messages"),  # type: ignore[arg-type]  # checked by the driver
                    response_message=record.get("response_message") or None,
                    source=ref,
                    tools=tools,
                    metadata=metadata,
                    timestamp=epoch_timestamp(record.get("timestamp")),
                    # The answer's own spans first (finer than the record's scalar, the version at the call's end).
                    weight_versions=reported_versions(answer_meta, record),
                    sampling=request_sampling(raw_request),
                )
            )
        if streamed:
            session.note("streamed calls: no raw response stored, reasoning text is lost from their response messages")
        return session


def _read_store(
    path: Path,
) -> tuple[list[tuple[str, str, int, Any]], dict[str, tuple[int, Any]], dict[str, int], list[tuple[Any, int]]]:
    """The (session, trace, rowid, record) rows in session order, every record by trace id, the trace ids
    the traces table holds more than once (with their count), and the rows whose session id is not text."""
    if not path.is_file():
        raise SourceError("expected an SQLite database file", file=path)
    try:
        # A URI of the path, percent-encoded: "traces#1.db" must not open "traces" (and create it).
        connection = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise SourceError(f"cannot open the database ({exc})", file=path) from None
    try:
        joined = connection.execute(_QUERY).fetchall()
        every = connection.execute("SELECT trace_id, rowid, data FROM traces").fetchall()
    except sqlite3.DatabaseError as exc:
        raise SourceError(
            f"not an rLLM gateway trace store ({exc})",
            file=path,
            tip="the gateway writes it with store_worker='sqlite'",
        ) from None
    finally:
        connection.close()
    counts = Counter(trace_id for trace_id, _, _ in every)
    duplicated = {trace_id: n for trace_id, n in counts.items() if n > 1}
    records = {trace_id: (rowid, _parse(data)) for trace_id, rowid, data in every}
    rows = []
    unattributed: dict[Any, int] = {}
    seen: set[tuple[str, Any]] = set()
    for sid, trace_id, rowid, created in joined:
        if not isinstance(sid, str):
            unattributed.setdefault(sid, rowid)
            continue
        if (sid, trace_id) in seen:
            continue  # one trace, several traces rows: the session is rejected above
        seen.add((sid, trace_id))
        rows.append((sid, trace_id, rowid, records[trace_id][1], _seconds(created)))
    rows.sort(key=lambda r: (r[0], _arrival(r[3], r[4]), r[4], r[2]))
    return [r[:4] for r in rows], records, duplicated, sorted(unattributed.items(), key=lambda item: item[1])


def _seconds(value: Any) -> float:
    """A ``created_at`` as seconds; one SQLite stored as text or not at all sorts last (then by row)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond float range
        return math.inf


def _arrival(record: Any, created_at: float) -> float:
    """When the call's response arrived: the record's timestamp, else the store's write time."""
    stamp = record.get("timestamp") if isinstance(record, dict) else None
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool) and stamp > 0:
        try:
            return float(stamp)
        except OverflowError:  # an integer beyond float range: later than any time
            return math.inf
    return float(created_at)


def _parse(data: Any) -> Any:
    try:
        return json.loads(data)
    except (TypeError, ValueError):
        return None


def resolve_prompt(trace_id: str, records: dict[str, tuple[int, Any]]) -> list[Any] | str:
    """A trace's full prompt ids, following ``parent_trace_id`` links; a reason string when the chain is broken.

    A root record (``prompt_delta_token_ids`` null) holds the full prompt; a
    link's prompt is its parent's prompt + the parent's completion + its delta.
    """
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    current = trace_id
    while True:
        if current in seen:
            return f"broken parent chain: a cycle through trace {current}"
        seen.add(current)
        entry = records.get(current)
        if entry is None or not isinstance(entry[1], dict):
            return f"broken parent chain: parent trace {current} is not in the store"
        record = entry[1]
        if record.get("prompt_delta_token_ids") is None:
            base = record.get("prompt_token_ids")
            if not isinstance(base, list):
                return f"trace {current} has no prompt_token_ids"
            break
        chain.append(record)
        parent = record.get("parent_trace_id")
        if not isinstance(parent, str) or not parent:
            return f"broken parent chain: trace {current} has a prompt delta but no parent_trace_id"
        current = parent
    prompt = list(base)
    # Fold back down: each link appends its parent's completion, then its own delta.
    for link in reversed(chain):
        parent_record = records[link["parent_trace_id"]][1]
        completion = parent_record.get("completion_token_ids") or []
        delta = link["prompt_delta_token_ids"]
        if not isinstance(completion, list) or not isinstance(delta, list):
            return "a prompt delta or completion in the parent chain is not a list"
        prompt += completion + delta
    return prompt
