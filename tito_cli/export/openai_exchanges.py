"""A turn log written out as ``openai-exchanges`` JSON Lines (the inverse of that importer).

Each turn becomes one ``{session_id, seq, request, response}`` line whose
response has vLLM's shape: ``prompt_token_ids`` at the root, the choice's
``token_ids``, its logprobs in ``logprobs.content[].logprob`` (with ``token``
spelled ``token_id:<id>``, as vLLM's ``return_tokens_as_token_ids`` does).  The
sessions table (rewards) goes to a separate rewards file in the shape
``tito import --rewards`` reads.  Importing both back rebuilds the same samples.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._atomic import StagedFile, publish
from .._targets import check_target, writing
from ..errors import InvalidSessionError, OutputError
from ..read.files import check_sessions_given, discover_files
from ..read.turnlog import TurnLog
from ..read.validate import parse_session
from ..turns import Reject, SessionInfo, Turn

__all__ = ["ExchangesExport", "exchange_record", "export_exchanges"]


@dataclass(slots=True)
class ExchangesExport:
    out: Path
    rewards_out: Path | None
    sessions: int = 0
    turns: int = 0
    rewards: int = 0
    #: Sessions left out because their rows are invalid (they would not rebuild either).
    rejected: list[Reject] = field(default_factory=list)


def exchange_record(session_id: str, turn: Turn) -> dict[str, Any]:
    """One turn as an exchange line (vLLM's response shape)."""
    output = [int(t) for t in turn.output_ids]
    choice: dict[str, Any] = {
        "index": 0,
        "message": turn.response_message,
        "finish_reason": turn.finish_reason,
        "token_ids": output,
        "logprobs": None,
    }
    if turn.output_logprobs is not None:
        content = [
            {"token": f"token_id:{token}", "logprob": float(lp)}
            for token, lp in zip(output, turn.output_logprobs, strict=True)
        ]
        choice["logprobs"] = {"content": content}
    request: dict[str, Any] = {"messages": turn.prompt_messages, "return_token_ids": True}
    if turn.tools is not None:
        request["tools"] = turn.tools
    if turn.output_logprobs is not None:
        request["logprobs"] = True
    record: dict[str, Any] = {
        "session_id": session_id,
        "seq": turn.seq,
        "request": request,
        "response": {
            "object": "chat.completion",
            "prompt_token_ids": [int(t) for t in turn.prompt_ids],
            "choices": [choice],
        },
    }
    if turn.metadata is not None:
        record["metadata"] = turn.metadata
    return record


def _rewards_record(session_id: str, info: SessionInfo) -> dict[str, Any]:
    record: dict[str, Any] = {"session_id": session_id, "reward": info.reward}
    for key in ("index", "group_index", "label", "metadata", "rollout_id"):
        value = getattr(info, key)
        if value is not None:
            record[key] = value
    return record


def _same(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def export_exchanges(
    inputs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    rewards_out: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
) -> ExchangesExport:
    """Write every valid session of the turn log under ``inputs`` to ``out`` (JSONL), in session-id and seq order.

    ``rewards_out`` receives the sessions table as a rewards file.  Both files
    appear atomically.  Sessions with invalid rows are left out and listed in
    the result.
    """
    out = Path(out)
    rewards_path = None if rewards_out is None else Path(rewards_out)
    paths = [Path(p) for p in inputs]
    found = discover_files(paths)
    for path in (out, rewards_path):
        if path is not None:
            check_target(path, overwrite=overwrite, reads=paths, found=found)
    if rewards_path is not None and _same(out, rewards_path):
        raise OutputError("--out and --rewards-out name the same file", file=rewards_path)
    log = TurnLog.open(paths, index=True)
    check_sessions_given(paths, log.files)
    table = log.read_sessions()
    result = ExchangesExport(out=out, rewards_out=rewards_path)

    def lines() -> Iterator[str]:
        for rows in log.iter_sessions():
            sid = rows.session_id
            if sid in table.invalid:
                reason, ref = table.invalid[sid]
                result.rejected.append(Reject(sid, reason, ref.file, ref.row))
                continue
            try:
                turns = parse_session(rows)
            except InvalidSessionError as exc:
                result.rejected.append(Reject(sid, exc.message, exc.file, exc.row))
                continue
            result.sessions += 1
            for turn in turns:
                result.turns += 1
                yield json.dumps(exchange_record(sid, turn), ensure_ascii=False) + "\n"

    # Both files staged, then published together: a failure leaves both previous files as they were.
    staged = [StagedFile(out)]
    try:
        with writing(out), staged[0].path.open("w", encoding="utf-8") as handle:
            handle.writelines(lines())
        if rewards_path is not None:
            records = [_rewards_record(sid, info) for sid, info in sorted(table.infos.items())]
            result.rewards = len(records)
            staged.append(StagedFile(rewards_path))
            with writing(rewards_path):
                text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
                staged[1].path.write_text(text, encoding="utf-8")
        publish(staged)
    except BaseException:
        for file in staged:
            file.discard()
        raise
    return result
