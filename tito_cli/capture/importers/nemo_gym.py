"""``nemo-gym``: NVIDIA NeMo Gym token-capture folders, with rewards from a rollouts JSONL.

Per rollout, the capture folder holds ``<rollout>.tokens.jsonl`` (one
``TokenEntry`` per model call: ``prompt_token_ids``, ``generation_token_ids``,
``generation_log_probs``, ``model_call_id``; entry order carries no meaning)
and ``<rollout>.capture.jsonl`` (the exchanges: ``model_call_id``, ``dialect``
responses|chat|messages, ``started_at``, ``request``, ``response``).  Entries
join exchanges by ``model_call_id`` and are ordered by ``started_at``.  A rollout
whose capture failed for a call (``<rollout>.tokens.incomplete``, an
``incomplete`` state, or an intent without an entry) is rejected.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InvalidSessionError, SourceError
from .base import (
    ImportedSession,
    ImportedTurn,
    Importer,
    SessionOutcome,
    SourceRef,
    epoch_timestamp,
    iso_timestamp,
    read_json_lines,
    reject,
    request_sampling,
)

__all__ = ["NemoGymImporter", "responses_messages", "routed_experts"]

#: The newest TokenEntry schema this importer understands (NeMo Gym's records.py).
MAX_SCHEMA_VERSION = 3

_TOKENS = ".tokens.jsonl"


class NemoGymImporter(Importer):
    name = "nemo-gym"
    summary = "NeMo Gym token-capture folders (<rollout>.tokens.jsonl + .capture.jsonl), rewards from a rollouts JSONL."
    sources_hint = "token-capture folder (and optionally the rollouts JSONL)"
    server_responses = True

    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        self.check_sources(sources)
        folders = [p for p in sources if p.is_dir()]
        if not folders:
            raise SourceError("give the token-capture folder", file=sources[0])
        rewards: dict[str, SessionOutcome] = {}
        for path in sources:
            if path.is_file():
                rewards.update(_rollout_rewards(path))
        for folder in folders:
            files = sorted(folder.rglob(f"*{_TOKENS}"))
            if not files:
                raise SourceError(f"no *{_TOKENS} in this folder", file=folder)
            for tokens in files:
                rid = tokens.name[: -len(_TOKENS)]
                session = _rollout(tokens.parent, rid)
                if isinstance(session, ImportedSession):
                    session.outcome = rewards.get(rid)
                    if session.outcome is None and rewards:
                        session.note("reward: the rollouts file has no row for this rollout: no sessions row")
                yield session


#: NeMo Gym's row keys (``nemo_gym/global_config.py``) and its capture-id pattern (``rollout_correlation.py``).
ROLLOUT_ID_KEY = "_ng_rollout_id"
TASK_INDEX_KEY = "_ng_task_index"
ROLLOUT_INDEX_KEY = "_ng_rollout_index"
ATTEMPT_INDEX_KEY = "_ng_attempt_index"
_ROLLOUT_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def rollout_id_of(row: dict[str, Any]) -> str | None:
    """The capture key NeMo Gym files a rollout's token capture under, from its rollouts row.

    NeMo Gym's own rule (``maybe_rollout_id_from_run_body``): an explicit
    ``_ng_rollout_id``, else ``"{_ng_task_index}-{_ng_rollout_index}"``; either
    takes ``-a{n}`` when ``_ng_attempt_index`` is above 0.  ``None`` when the
    row has neither; ``ValueError`` for an explicit id NeMo Gym would refuse.
    """
    explicit = row.get(ROLLOUT_ID_KEY)
    if explicit is not None:
        if not (isinstance(explicit, str) and _ROLLOUT_ID_PATTERN.match(explicit)):
            raise ValueError(f"{ROLLOUT_ID_KEY} {explicit!r} is not a NeMo Gym capture id")
        rollout_id = explicit
    else:
        task, rollout = row.get(TASK_INDEX_KEY), row.get(ROLLOUT_INDEX_KEY)
        if task is None or rollout is None:
            return None
        rollout_id = f"{task}-{rollout}"
    attempt = row.get(ATTEMPT_INDEX_KEY)
    if attempt is not None and int(attempt) > 0:
        rollout_id = f"{rollout_id}-a{int(attempt)}"
    return rollout_id


def _rollout_rewards(path: Path) -> dict[str, SessionOutcome]:
    rewards: dict[str, SessionOutcome] = {}
    for number, row in read_json_lines(path):
        if isinstance(row, SourceError):
            raise row
        if not isinstance(row, dict):
            raise SourceError("a rollouts row must be a JSON object", file=path, row=number)
        try:
            rid = rollout_id_of(row)
        except (ValueError, TypeError, OverflowError) as exc:
            raise SourceError(f"no usable rollout id ({exc})", file=path, row=number) from None
        reward = row.get("reward")
        if rid is None:
            raise SourceError(
                f"a rollouts row needs {ROLLOUT_ID_KEY}, or {TASK_INDEX_KEY} and {ROLLOUT_INDEX_KEY}",
                file=path,
                row=number,
            )
        if reward is not None and (isinstance(reward, bool) or not isinstance(reward, (int, float))):
            raise SourceError(f"reward must be a number, got {reward!r}", file=path, row=number)
        if reward is not None and not _finite(reward):
            raise SourceError("reward must be a finite number, got one beyond float range", file=path, row=number)
        if rid in rewards:
            raise SourceError(f"rollout {rid!r} has two rows", file=path, row=number)
        rewards[rid] = SessionOutcome(
            reward=None if reward is None else float(reward), source=SourceRef(str(path), number)
        )
    return rewards


def _finite(number: float) -> bool:
    try:
        return math.isfinite(number)
    except OverflowError:  # an integer too large for a float
        return False


def _rollout(folder: Path, rid: str) -> ImportedSession | InvalidSessionError:
    tokens_path = folder / f"{rid}{_TOKENS}"
    capture_path = folder / f"{rid}.capture.jsonl"
    tokens_ref = SourceRef(str(tokens_path))
    incomplete = folder / f"{rid}.tokens.incomplete"
    if incomplete.exists():
        calls = [c for c in incomplete.read_text(encoding="utf-8", errors="replace").split() if c]
        listed = f" (calls {', '.join(calls)})" if calls else ""
        return reject(f"rollout marked incomplete: capture failed for a call{listed}", SourceRef(str(incomplete)), rid)
    state_path = folder / f"{rid}.tokens.state.json"
    if state_path.exists():
        try:
            state = json.loads(state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            state = None
        if isinstance(state, dict) and state.get("incomplete"):
            return reject("rollout marked incomplete in its capture state", SourceRef(str(state_path)), rid)
    entries: dict[str, tuple[SourceRef, dict[str, Any]]] = {}
    for number, entry in read_json_lines(tokens_path):
        ref = SourceRef(str(tokens_path), number)
        if isinstance(entry, SourceError):
            return reject(entry.message, ref, rid)
        if not isinstance(entry, dict) or not isinstance(entry.get("model_call_id"), str):
            return reject("a token entry needs a model_call_id", ref, rid)
        version = entry.get("schema_version", 1)
        if type(version) is not int or version > MAX_SCHEMA_VERSION:
            return reject(f"token entry schema_version {version!r} is newer than {MAX_SCHEMA_VERSION}", ref, rid)
        entries[entry["model_call_id"]] = (ref, entry)
    intents = folder / f"{rid}.tokens.intents"
    if intents.exists():
        for number, line in enumerate(intents.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
            call = _intent_call(line)
            if call and call not in entries:
                return reject(
                    f"rollout incomplete: intent for call {call} has no token entry",
                    SourceRef(str(intents), number),
                    rid,
                )
    if not capture_path.exists():
        return reject(f"no {capture_path.name} beside the token entries (messages unknown)", tokens_ref, rid)
    exchanges: dict[str, tuple[SourceRef, dict[str, Any]]] = {}
    for number, exchange in read_json_lines(capture_path):
        ref = SourceRef(str(capture_path), number)
        if isinstance(exchange, SourceError):
            return reject(exchange.message, ref, rid)
        if isinstance(exchange, dict) and isinstance(exchange.get("model_call_id"), str):
            exchanges[exchange["model_call_id"]] = (ref, exchange)
    session = ImportedSession(rid, [], tokens_ref)
    order = []
    for call, (ref, _entry) in entries.items():
        if call not in exchanges:
            return reject(f"model call {call}: no capture exchange (messages unknown)", ref, rid)
        started = exchanges[call][1].get("started_at")
        order.append((_sort_key(started), ref.row or 0, call))
    for _, _, call in sorted(order):
        ref, entry = entries[call]
        exchange_ref, exchange = exchanges[call]
        mapped = _exchange(exchange)
        if isinstance(mapped, str):
            return reject(f"model call {call}: {mapped}", exchange_ref, rid)
        messages, tools, response, finish = mapped
        if finish is None:
            session.note("finish_reason: not in the exchange: recorded as 'stop'")
        experts, unusable = routed_experts(entry)
        if unusable is not None:
            session.note(f"routed_experts: {unusable}: not kept for the call")
        session.turns.append(
            ImportedTurn(
                prompt_ids=entry.get("prompt_token_ids"),  # type: ignore[arg-type]  # checked by the driver
                output_ids=entry.get("generation_token_ids"),  # type: ignore[arg-type]
                output_logprobs=entry.get("generation_log_probs"),
                finish_reason=finish or "stop",
                prompt_messages=messages,
                response_message=response,
                source=ref,
                tools=tools,
                metadata={"model_call_id": call, "dialect": exchange.get("dialect")},
                timestamp=epoch_timestamp(exchange.get("completed_at")) or iso_timestamp(exchange.get("completed_at")),
                routed_experts=experts,
                sampling=request_sampling(exchange.get("request")),
            )
        )
    return session


#: NeMo-RL's string envelope of routed experts (``nrlre1:<dtype>:<S>x<L>x<K>:<base64>``, little-endian).
_ENVELOPE = re.compile(r"^nrlre1:(u?int(?:8|16|32|64)):(\d+)x(\d+)x(\d+):([A-Za-z0-9+/=]*)$")


def routed_experts(entry: dict[str, Any]) -> tuple[Any, str | None]:
    """A token entry's routed experts as rows ``[tokens - 1, layers, topk]`` (from position 0), and why not.

    NeMo Gym stores what the model server returned (``TokenEntry.routed_experts``): nested int lists
    ``[tokens, layers, topk]``, or NeMo-RL's string envelope, passed on without looking.  The rows are
    the routing of every input position of the call, prompt and output: ``len(prompt) + len(output) - 1``
    of them (the last generated token was never an input).  Rows of any other count are not kept (the
    note says so): which positions they cover is unknowable.
    """
    value = entry.get("routed_experts")
    if value is None:
        return None, None
    rows: np.ndarray[Any, Any]
    if isinstance(value, str):
        match = _ENVELOPE.match(value)
        if match is None:
            return None, "a string that is not an nrlre1 envelope"
        dtype, *dims, payload = match.groups()
        shape = tuple(int(d) for d in dims)
        try:
            raw = base64.b64decode(payload, validate=True)
            rows = np.frombuffer(raw, np.dtype(dtype).newbyteorder("<")).reshape(shape)
        except (ValueError, binascii.Error):
            return None, f"an nrlre1 envelope whose data is not {'x'.join(dims)} {dtype} values"
    else:
        try:
            rows = np.asarray(value)
        except (ValueError, TypeError, OverflowError):
            return None, "not rows of integers"
        if rows.ndim != 3 or (rows.size and rows.dtype.kind not in "iu"):
            return None, "not rows [tokens, layers, topk] of integers"
    prompt, output = entry.get("prompt_token_ids"), entry.get("generation_token_ids")
    tokens = (len(prompt) if isinstance(prompt, list) else 0) + (len(output) if isinstance(output, list) else 0)
    if rows.shape[0] != tokens - 1:
        return None, f"{rows.shape[0]} rows for a call of {tokens} tokens (expected {tokens - 1})"
    if rows.size and (int(rows.min()) < 0 or int(rows.max()) > 2**31 - 1):
        return None, "an expert index outside 0..2**31-1"
    return rows.astype(np.int32), None


def _sort_key(started: Any) -> tuple[int, float, str]:
    if isinstance(started, (int, float)) and not isinstance(started, bool):
        try:
            return (0, float(started), "")
        except OverflowError:  # an integer beyond float range
            return (0, math.inf if started > 0 else -math.inf, "")
    parsed = iso_timestamp(started)
    if parsed is not None:
        return (0, parsed.timestamp(), "")
    return (1, 0.0, str(started))


def _intent_call(line: str) -> str | None:
    line = line.strip()
    if not line:
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return line
    if isinstance(value, dict) and isinstance(value.get("model_call_id"), str):
        return str(value["model_call_id"])
    return line if not isinstance(value, str) else value


_RESPONSES_FINISH = {"max_output_tokens": "length", "content_filter": "content_filter"}
_MESSAGES_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def _exchange(exchange: dict[str, Any]) -> tuple[list[Any], Any, Any, str | None] | str:
    """An exchange as (prompt messages, tools, response message, finish reason), or why it cannot be."""
    request, response = exchange.get("request"), exchange.get("response")
    if not isinstance(request, dict) or not isinstance(response, dict):
        return "the exchange has no request or response object"
    dialect = exchange.get("dialect", "chat")
    if dialect == "chat":
        choices = response.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        return request.get("messages") or [], request.get("tools"), choice.get("message"), choice.get("finish_reason")
    if dialect == "responses":
        items = request.get("input")
        if isinstance(items, str):
            items = [{"type": "message", "role": "user", "content": items}]
        messages = responses_messages(items or [])
        if request.get("instructions"):
            messages.insert(0, {"role": "system", "content": request["instructions"]})
        output = responses_messages(response.get("output") or [])
        message = output[0] if len(output) == 1 else {"role": "assistant", "content": ""}
        finish = None
        if response.get("status") == "completed":
            finish = "tool_calls" if message.get("tool_calls") else "stop"
        elif response.get("status") == "incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason")
            finish = _RESPONSES_FINISH.get(reason, "abort") if isinstance(reason, str) else "abort"
        return messages, request.get("tools"), message, finish
    if dialect == "messages":
        messages = list(request.get("messages") or [])
        if request.get("system"):
            messages.insert(0, {"role": "system", "content": request["system"]})
        message = {"role": "assistant", "content": response.get("content")}
        stop = response.get("stop_reason")
        return messages, request.get("tools"), message, _MESSAGES_FINISH.get(stop) if isinstance(stop, str) else None
    return f"unknown dialect {dialect!r}"


def _text(content: Any) -> Any:
    """Responses content parts joined to text; other content as it is."""
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    return content


def responses_messages(items: list[Any]) -> list[dict[str, Any]]:
    """Responses-API items projected onto chat messages.

    A run of model-side items (reasoning, an assistant message, function
    calls) becomes one assistant message, so that a response's output and the
    same items sent back in the next request's input project identically.
    """
    messages: list[dict[str, Any]] = []
    assistant: dict[str, Any] | None = None

    def close() -> None:
        nonlocal assistant
        if assistant is not None:
            messages.append(assistant)
            assistant = None

    def open_assistant() -> dict[str, Any]:
        nonlocal assistant
        if assistant is None:
            assistant = {"role": "assistant", "content": ""}
        return assistant

    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "reasoning":
            summary = "".join(p.get("text", "") for p in item.get("summary") or [] if isinstance(p, dict))
            current = open_assistant()
            current["reasoning_content"] = current.get("reasoning_content", "") + summary
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments")},
            }
            open_assistant().setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            close()
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": _text(item.get("output"))})
        elif kind == "message" and item.get("role") == "assistant":
            current = open_assistant()
            current["content"] += _text(item.get("content")) or ""
        elif kind == "message":
            close()
            messages.append({"role": item.get("role"), "content": _text(item.get("content"))})
    close()
    return messages
