"""Shared helpers for tests: build turn logs from plain records."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tito_cli.capture.writer import TurnLogWriter

REPO = Path(__file__).resolve().parent.parent
CONFORMANCE = REPO / "fixtures" / "conformance"
#: The slime-0.3 policy's corpus (SPEC §8), run with ``--policy slime-0.3``.
CONFORMANCE_SLIME03 = REPO / "fixtures" / "conformance-slime03"


def conformance_folders(corpus: Path = CONFORMANCE) -> list[Path]:
    return sorted(p for p in corpus.iterdir() if (p / "turns.jsonl").is_file())


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_log(
    out_dir: Path,
    turns: Iterable[dict[str, Any]],
    sessions: Iterable[dict[str, Any]] = (),
    **writer_options: Any,
) -> list[Path]:
    """Record turn and session records (conformance JSONL shape) through the capture writer."""
    options: dict[str, Any] = {"max_age": None, "name": "test"}
    options.update(writer_options)
    with TurnLogWriter(out_dir, **options) as writer:
        for t in turns:
            writer.record_turn(
                t["session_id"],
                t["prompt_ids"],
                t["output_ids"],
                t.get("output_logprobs"),
                t.get("finish_reason", "stop"),
                t["prompt_messages"],
                t.get("response_message"),
                tools=t.get("tools"),
                metadata=t.get("metadata"),
                seq=t.get("seq"),
                ill_formed=t.get("ill_formed", False),
            )
        for s in sessions:
            writer.finish_session(
                s["session_id"],
                s.get("reward"),
                index=s.get("index"),
                group_index=s.get("group_index"),
                label=s.get("label"),
                metadata=s.get("metadata"),
                rollout_id=s.get("rollout_id"),
            )
    return writer.files_written
