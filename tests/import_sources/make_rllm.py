"""Write ``rllm/traces.db``: a trace store written by the real rllm-model-gateway, for the docs' worked example.

Run from the repository root (``python -m tests.import_sources.make_rllm``;
needs ``pip install -e '.[import]'``).  The gateway runs on 127.0.0.1 in front
of the vLLM-shaped upstream of the tests, and the same three agent sessions
as ``test_import_rllm.py`` go through it.  Trace ids are the gateway's random
UUIDs, so a new run writes a different file with the same content.
"""

from __future__ import annotations

import json
import sqlite3
import tempfile
from pathlib import Path

from ..support.rllm_gateway import drive, running_gateway, stop, wait_for_traces

HERE = Path(__file__).resolve().parent / "rllm"


def main() -> None:
    HERE.mkdir(exist_ok=True)
    target = HERE / "traces.db"
    target.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory() as scratch, running_gateway(target, Path(scratch) / "gateway.log") as gateway:
        calls = drive(gateway.base)
        wait_for_traces(gateway.base, calls)
        stop(gateway.process)
    # Shrink the file: the store's pages hold the whole records.
    db = sqlite3.connect(target)
    db.execute("VACUUM")
    db.close()
    rewards = {"tool-session": 1.0, "retry-session": 0.5, "stream-session": 0.0}
    (HERE / "rewards.jsonl").write_text(
        "".join(json.dumps({"session_id": s, "reward": r}) + "\n" for s, r in rewards.items())
    )


if __name__ == "__main__":
    main()
