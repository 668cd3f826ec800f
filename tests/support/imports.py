"""What the import tests share: the fixture and broken-case folders, and a log's turn rows made whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.support.helpers import REPO

SOURCES = REPO / "tests" / "import_sources"
CASES = REPO / "tests" / "import_cases"


def turns_of(log: Path) -> list[dict[str, Any]]:
    """The log's turn rows, each row stored against a base (format 2) made whole again (docs/spec.md §9)."""
    rows = [row for path in sorted(log.glob("turns-*.parquet")) for row in pq.read_table(path).to_pylist()]
    by_key = {(r["session_id"], r["seq"]): r for r in rows}

    def whole(row: dict[str, Any]) -> dict[str, Any]:
        if row.get("base_seq") is None:
            return row
        base = whole(by_key[(row["session_id"], row["base_seq"])])
        ids = (base["prompt_ids"] + base["output_ids"])[: row["shared_prompt_ids"]] + row["prompt_ids"]
        held = json.loads(base["prompt_messages"])
        if base["response_message"] is not None and json.loads(base["response_message"]) is not None:
            held.append(json.loads(base["response_message"]))
        messages = held[: row["shared_messages"]] + json.loads(row["prompt_messages"])
        rebuilt = {**row, "prompt_ids": ids, "prompt_messages": json.dumps(messages), "base_seq": None}
        by_key[(row["session_id"], row["seq"])] = rebuilt
        return rebuilt

    return sorted((whole(r) for r in rows), key=lambda r: (r["session_id"], r["seq"]))
