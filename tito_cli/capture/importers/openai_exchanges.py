"""``openai-exchanges``: JSON Lines of OpenAI-compatible request/response pairs carrying token ids.

One line per generation call::

    {"session_id": "s1",                 # or a captured header, or the request path
     "seq": 0,                           # optional: kept; else line order within the session
     "timestamp": "2026-08-01T12:00:00Z",
     "request": {"model": ..., "messages": [...], "tools": [...], ...},
     "response": {...}}                  # or "chunks": [...] for a streamed call

The response is vLLM's (``prompt_token_ids`` at the root, ``choices[0].token_ids``,
logprobs in ``choices[0].logprobs.content[].logprob``) or SGLang's
(``prompt_token_ids`` and ``token_ids`` on the choice, logprobs also in
``meta_info.output_token_logprobs``).  A streamed call's chunks carry the prompt
ids on the first chunk and the output ids as deltas.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import InvalidSessionError, SourceError
from .base import (
    ImportedSession,
    ImportedTurn,
    Importer,
    SourceRef,
    epoch_timestamp,
    iso_timestamp,
    read_json_lines,
    reject,
    reported_versions,
    request_sampling,
)

__all__ = ["OpenAIExchangesImporter", "map_exchange", "session_from_path"]

#: The per-session URL of capture gateways (rLLM's, miles'): ids may contain "/".
SESSION_PATH = re.compile(r"/sessions/(.+?)(/v1(?:/.*)?)$")

NO_SESSION = "(no session id)"


def session_from_path(path: Any) -> str | None:
    if not isinstance(path, str):
        return None
    # A full URL: only its path counts (drop a query string).
    path = path.split("?", 1)[0]
    match = SESSION_PATH.search(path)
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class OpenAIExchangesOptions:
    """``tito import openai-exchanges``'s options."""

    session_header: str | None = field(
        default=None, metadata={"help": "the captured request header (in the record's headers) naming the session."}
    )


class OpenAIExchangesImporter(Importer):
    name = "openai-exchanges"
    Options = OpenAIExchangesOptions
    summary = "JSONL of {request, response} pairs whose responses carry vLLM's or SGLang's token ids."
    sources_hint = "JSONL file of exchanges"
    server_responses = True

    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        self.check_sources(sources)
        # Group by session in line order (sessions may interleave); map each line once all are read.
        grouped: dict[str, list[tuple[SourceRef, Any]]] = {}
        for path in sources:
            if path.is_dir():
                raise SourceError("expected a JSONL file, got a folder", file=path)
            for number, record in read_json_lines(path, id_key="session_id"):
                ref = SourceRef(str(path), number)
                if isinstance(record, SourceError):
                    sid = record.session_id or NO_SESSION
                else:
                    sid = self._session_id(record)
                if sid == NO_SESSION:
                    # Any session may be missing this turn: importing the others would be a guess.
                    raise self._unattributable(record, ref)
                grouped.setdefault(sid, []).append((ref, record))
        for sid, records in grouped.items():
            yield self._session(sid, records)

    def _unattributable(self, record: Any, ref: SourceRef) -> SourceError:
        """A line no session can be told from: the source is refused whole (sessions are imported whole or not)."""
        if isinstance(record, SourceError):
            reason = f"{record.message}: which session's turn it is cannot be told"
        else:
            hint = "; pass --session-header NAME" if self.options.session_header is None else ""
            reason = f"no session id (no session_id field, header or /sessions/<id>/v1 path){hint}"
        return SourceError(
            reason, file=ref.file, row=ref.row, tip="fix or remove the line: every session must be imported whole"
        )

    def _session_id(self, record: Any) -> str:
        if not isinstance(record, dict):
            return NO_SESSION
        sid = record.get("session_id")
        if isinstance(sid, str) and sid:
            return sid
        header = self.options.session_header
        headers = record.get("headers")
        if header and isinstance(headers, dict):
            for key, value in headers.items():
                if isinstance(key, str) and key.lower() == header.lower() and isinstance(value, str) and value:
                    return value
        for key in ("path", "url"):
            from_path = session_from_path(record.get(key))
            if from_path:
                return from_path
        return NO_SESSION

    def _session(self, sid: str, records: list[tuple[SourceRef, Any]]) -> ImportedSession | InvalidSessionError:
        first = records[0][0]
        session = ImportedSession(sid, [], first)
        failed = 0
        for ref, record in records:
            if isinstance(record, SourceError):
                return reject(record.message, ref, sid)  # JSON beyond the parser's limits, its session known
            if not isinstance(record, dict):
                return reject("a record must be a JSON object", ref, sid)
            mapped = map_exchange(record, ref)
            if isinstance(mapped, str):
                return reject(mapped, ref, sid)
            if mapped is None:
                failed += 1
                continue
            turn, notes = mapped
            session.turns.append(turn)
            for note in notes:
                if note not in session.filled:
                    session.filled.append(note)
        if failed:
            session.filled.append(f"calls without a completion (error responses): {failed} left out")
        return session


def map_exchange(record: dict[str, Any], ref: SourceRef) -> tuple[ImportedTurn, list[str]] | str | None:
    """One exchange as a turn plus notes on what was filled; a reason string when it cannot be
    mapped; ``None`` for a call that failed (an error response without choices)."""
    request = record.get("request")
    if not isinstance(request, dict):
        return "no request object"
    messages = request.get("messages")
    if messages is None:
        return "the request has no messages (a completions call, not chat)"
    notes: list[str] = []
    chunks = record.get("chunks")
    if isinstance(chunks, list):
        streamed = _from_chunks(chunks)
        if streamed is None:
            return None
        prompt, output, logprobs, streamed_message, finish = streamed
        message: Any = streamed_message
        # The versions travel on the chunks that report them (the last one reporting: the call's end).
        versions = reported_versions(*(c.get("metadata") for c in reversed(chunks) if isinstance(c, dict)))
    else:
        response = record.get("response")
        if not isinstance(response, dict):
            return "no response object (and no streamed chunks)"
        choices = response.get("choices")
        if not choices:
            return None
        choice = choices[0]
        if not isinstance(choice, dict):
            return "choices[0] is not an object"
        prompt = response.get("prompt_token_ids")
        if prompt is None:
            prompt = choice.get("prompt_token_ids")  # SGLang: per choice
        output = choice.get("token_ids")
        logprobs = _choice_logprobs(choice)
        message = choice.get("message")
        finish = choice.get("finish_reason")
        versions = reported_versions(response.get("metadata"), choice.get("meta_info"), response.get("meta_info"))
    if prompt is None or output is None:
        missing = "prompt_token_ids" if prompt is None else "token_ids"
        return f"no token ids (the response has no {missing}; ask the server with return_token_ids)"
    if logprobs is None:
        notes.append("output_logprobs: not in the response (no logprobs requested): recorded as none")
    if not isinstance(finish, str) or not finish:
        notes.append("finish_reason: not in the response: recorded as 'stop'")
        finish = "stop"
    metadata = record.get("metadata")
    timestamp = iso_timestamp(record.get("timestamp")) or epoch_timestamp(record.get("timestamp"))
    seq = record.get("seq")
    if seq is not None and type(seq) is not int:
        # Ignored, the line order would stand in for it: the turns could be reordered without a word.
        return f"seq {seq!r} is not an integer"
    turn = ImportedTurn(
        prompt_ids=prompt,
        output_ids=output,
        output_logprobs=logprobs,
        finish_reason=finish,
        prompt_messages=messages,
        response_message=message,
        source=ref,
        tools=request.get("tools"),
        metadata=metadata,
        timestamp=timestamp,
        seq=seq,
        weight_versions=versions,
        sampling=request_sampling(request),
    )
    return turn, notes


def _choice_logprobs(choice: dict[str, Any]) -> list[Any] | None:
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
        return [entry.get("logprob") if isinstance(entry, dict) else entry for entry in logprobs["content"]]
    meta = choice.get("meta_info")
    if isinstance(meta, dict) and isinstance(meta.get("output_token_logprobs"), list):
        # SGLang: [logprob, token_id, text] per output token.
        return [e[0] if isinstance(e, list) and e else e for e in meta["output_token_logprobs"]]
    return None


def _from_chunks(chunks: list[Any]) -> tuple[Any, Any, Any, dict[str, Any], Any] | None:
    """Reassemble a streamed chat completion (vLLM: prompt ids on the first chunk, token-id deltas)."""
    prompt: Any = None
    output: list[Any] = []
    logprobs: list[Any] | None = None
    role = "assistant"
    content: list[str] = []
    reasoning: dict[str, list[str]] = {}
    tool_calls: dict[int, dict[str, Any]] = {}
    finish: Any = None
    seen_choice = False
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        if prompt is None and chunk.get("prompt_token_ids") is not None:
            prompt = chunk["prompt_token_ids"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            seen_choice = True
            if prompt is None and choice.get("prompt_token_ids") is not None:
                prompt = choice["prompt_token_ids"]
            ids = choice.get("token_ids")
            if isinstance(ids, list):
                output.extend(ids)
            lps = _choice_logprobs(choice)
            if lps is not None:
                logprobs = (logprobs or []) + lps
            delta = choice.get("delta") or {}
            if isinstance(delta.get("role"), str):
                role = delta["role"]
            if isinstance(delta.get("content"), str):
                content.append(delta["content"])
            for key in ("reasoning_content", "reasoning"):
                if isinstance(delta.get(key), str):
                    reasoning.setdefault(key, []).append(delta[key])
            for call in delta.get("tool_calls") or []:
                _merge_tool_call(tool_calls, call)
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if not seen_choice:
        return None
    message: dict[str, Any] = {"role": role, "content": "".join(content)}
    for key, parts in reasoning.items():
        message[key] = "".join(parts)
    if tool_calls:
        message["tool_calls"] = [tool_calls[i] for i in sorted(tool_calls)]
    return prompt, output, logprobs, message, finish


def _merge_tool_call(calls: dict[int, dict[str, Any]], delta: Any) -> None:
    """Streamed tool calls arrive in pieces keyed by ``index``; arguments are concatenated."""
    if not isinstance(delta, dict):
        return
    index = delta.get("index", 0)
    call = calls.setdefault(index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}})
    if delta.get("id"):
        call["id"] = delta["id"]
    if delta.get("type"):
        call["type"] = delta["type"]
    function = delta.get("function") or {}
    if function.get("name"):
        call["function"]["name"] += function["name"]
    if function.get("arguments"):
        call["function"]["arguments"] += function["arguments"]
