"""The reference-style rebuild, a baseline: the plain-Python algorithm fed from ``to_pylist``.

    python benchmarks/reference_rebuild.py LOGS OUT.parquet

What a straightforward port of the reference does: read every turns file with
pyarrow, convert the rows to Python objects, group them by session, route and
linearize each session with plain lists (``tests/support/spec_model.py``, the SPEC
written out literally), and write the samples with ``pa.Table.from_pylist``.
It reads format 1 only (whole prompts), as the reference does.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.spec_model import model_rebuild  # noqa: E402

COLUMNS = ["session_id", "seq", "prompt_ids", "output_ids", "output_logprobs", "prompt_messages", "response_message"]


def main() -> None:
    logs, out = Path(sys.argv[1]), Path(sys.argv[2])
    by_session: dict[str, list[Any]] = {}
    rewards: dict[str, float] = {}
    for path in sorted(logs.rglob("*.parquet")):
        names = pq.read_schema(path).names
        if "base_seq" in names:
            raise SystemExit(f"{path}: format 2; the reference reads format 1 only")
        if "prompt_ids" not in names:
            for row in pq.read_table(path).to_pylist():
                rewards[row["session_id"]] = row["reward"] or 0.0
            continue
        for row in pq.read_table(path, columns=COLUMNS).to_pylist():
            row["prompt_messages"] = json.loads(row["prompt_messages"])
            response = row["response_message"]
            row["response_message"] = None if response is None else json.loads(response)
            by_session.setdefault(row["session_id"], []).append(SimpleNamespace(**row))
    rows = []
    for sid in sorted(by_session):
        for number, sample in enumerate(model_rebuild(by_session[sid], 1024, rewards.get(sid, 0.0), "split")):
            rows.append({"session_id": sid, "sample_index": number, "tokens": sample.tokens,
                         "response_length": sample.response_length, "loss_mask": sample.loss_mask,
                         "rollout_log_probs": sample.rollout_log_probs, "reward": sample.reward})
    pq.write_table(pa.Table.from_pylist(rows), out)
    print(len(rows))


if __name__ == "__main__":
    main()
