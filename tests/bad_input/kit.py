"""Building blocks for bad-input scenarios.

Scenario logs are written with pyarrow directly, not through the capture
writer, because most of them hold what the writer would never produce (null
ids, int64 ids, malformed JSON, wrong types).  Turn records use the
conformance shape (``tests/support/helpers.py``): JSON columns may be given as Python
values (serialised here) or as strings (stored verbatim, which is how
malformed JSON gets in).

Valid sessions are copies of conformance sessions under a new id, so the
harness can demand that their samples equal the reference's exactly.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tito_cli.schema import SESSIONS_SCHEMA, TURNS_SCHEMA, TURNS_SCHEMA_V2, table_metadata

from ..support.helpers import CONFORMANCE, read_jsonl

__all__ = [
    "GOOD",
    "case",
    "case_session",
    "delta_rows",
    "turns_table",
    "write_good",
    "write_sessions",
    "write_turns",
]

_JSON_COLUMNS = ("prompt_messages", "response_message", "tools", "metadata")

#: The valid sessions most scenarios carry next to their bad ones: new id -> conformance session.
#: A forking session with logprobs, and a long generated one with forks, realigns and rewrites.
GOOD = {
    "good-fork": "cases-threshold-1024/case-3.7",
    "good-long": "random-threshold-1024/r7-0005",
}


@cache
def _folder_turns(folder: str) -> tuple[dict[str, Any], ...]:
    return tuple(read_jsonl(CONFORMANCE / folder / "turns.jsonl"))


@cache
def _folder_sessions(folder: str) -> tuple[dict[str, Any], ...]:
    return tuple(read_jsonl(CONFORMANCE / folder / "sessions.jsonl"))


def case(ref: str, new_id: str) -> list[dict[str, Any]]:
    """The turns of conformance session ``folder/session`` (``ref``), renamed to ``new_id``, in seq order."""
    folder, sid = ref.split("/")
    turns = [copy.deepcopy(t) for t in _folder_turns(folder) if t["session_id"] == sid]
    if not turns:
        raise KeyError(f"no conformance session {ref}")
    for t in turns:
        t["session_id"] = new_id
    return sorted(turns, key=lambda t: t["seq"])


def case_session(ref: str, new_id: str) -> dict[str, Any]:
    """The sessions row of conformance session ``ref``, renamed to ``new_id``."""
    folder, sid = ref.split("/")
    for s in _folder_sessions(folder):
        if s["session_id"] == sid:
            return {**s, "session_id": new_id}
    raise KeyError(f"no conformance sessions row for {ref}")


def write_good(log: Path, name: str = "good") -> None:
    """Write the :data:`GOOD` sessions (turns and sessions rows) as ``turns-<name>`` / ``sessions-<name>``."""
    turns = [t for new_id, ref in GOOD.items() for t in case(ref, new_id)]
    write_turns(log / f"turns-{name}.parquet", turns)
    write_sessions(log / f"sessions-{name}.parquet", [case_session(ref, new_id) for new_id, ref in GOOD.items()])


def _json_cell(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def turns_table(
    turns: Iterable[dict[str, Any]],
    *,
    types: dict[str, pa.DataType] | None = None,
    drop: Iterable[str] = (),
    tagged: bool = True,
    format: int = 1,
) -> pa.Table:
    """A turns table from records: SPEC §2 types unless ``types`` overrides a column; ``drop`` removes columns.

    ``format=2`` adds the reference columns of docs/spec.md §9 (records give them, or they are null).
    """
    rows = list(turns)
    fields = []
    columns = []
    for f in TURNS_SCHEMA_V2 if format == 2 else TURNS_SCHEMA:
        if f.name in drop:
            continue
        typ = (types or {}).get(f.name, f.type)
        values = [r.get(f.name) for r in rows]
        if f.name in _JSON_COLUMNS:
            values = [_json_cell(v) for v in values]
        if f.name == "finish_reason":
            values = [r.get("finish_reason", "stop") for r in rows]
        # Nullability is the reader's business: the file must be able to hold the bad value.
        fields.append(pa.field(f.name, typ))
        columns.append(pa.array(values, typ))
    schema = pa.schema(fields, metadata=table_metadata("turns", format=str(format)) if tagged else None)
    return pa.Table.from_arrays(columns, schema=schema)


def write_turns(path: Path, turns: Iterable[dict[str, Any]], **options: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(turns_table(turns, **options), path)
    return path


def write_sessions(path: Path, sessions: Iterable[dict[str, Any]]) -> Path:
    rows = list(sessions)
    columns = {}
    for f in SESSIONS_SCHEMA:
        values = [r.get(f.name) for r in rows]
        if f.name == "metadata":
            values = [_json_cell(v) for v in values]
        columns[f.name] = pa.array(values, f.type)
    schema = pa.schema([pa.field(f.name, f.type) for f in SESSIONS_SCHEMA], metadata=table_metadata("sessions"))
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pydict(columns, schema=schema), path)
    return path


def delta_rows(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Turn records (one session, seq order) as format-2 records, each stored against the previous one.

    Written out here from docs/spec.md §9, independently of the capture writer's encoder.
    """
    out = []
    for i, turn in enumerate(turns):
        if i == 0:
            out.append(dict(turn))
            continue
        base = turns[i - 1]
        held = list(base["prompt_ids"]) + list(base["output_ids"])
        ids = list(turn["prompt_ids"])
        shared_ids = 0
        while shared_ids < min(len(held), len(ids)) and held[shared_ids] == ids[shared_ids]:
            shared_ids += 1
        base_messages = [json.dumps(m) for m in base["prompt_messages"]]
        if base.get("response_message") is not None:
            base_messages.append(json.dumps(base["response_message"]))
        messages = [json.dumps(m) for m in turn["prompt_messages"]]
        shared_messages = 0
        while shared_messages < min(len(base_messages), len(messages)) and (
            base_messages[shared_messages] == messages[shared_messages]
        ):
            shared_messages += 1
        out.append(
            {
                **turn,
                "base_seq": base["seq"],
                "shared_prompt_ids": shared_ids,
                "shared_messages": shared_messages,
                "prompt_ids": ids[shared_ids:],
                "prompt_messages": turn["prompt_messages"][shared_messages:],
            }
        )
    return out
