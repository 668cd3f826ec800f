"""Scenario folders (``tests/scenarios/<name>/``) turned into turn logs.

Each scenario is a ``turns.jsonl`` and ``sessions.jsonl`` in the conformance
shape; adding a regression case is adding a folder.  ``tokenizer/`` is a
small real BPE tokenizer the ``agent`` scenario was tokenized with (see
``scenarios/make_agent.py``).
"""

from __future__ import annotations

from pathlib import Path

from .helpers import read_jsonl, write_log

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
TOKENIZER = SCENARIOS / "tokenizer"


def scenario_log(name: str, out_dir: Path, *, tokenizer: str | None = str(TOKENIZER), max_rows: int = 5) -> Path:
    """Write scenario ``name`` as a turn log under ``out_dir`` (a few rows per file) and return it."""
    folder = SCENARIOS / name
    write_log(
        out_dir,
        read_jsonl(folder / "turns.jsonl"),
        read_jsonl(folder / "sessions.jsonl"),
        tokenizer=tokenizer,
        max_rows=max_rows,
    )
    return out_dir


if __name__ == "__main__":  # python -m tests.support.scenario_logs NAME OUT_DIR (the docs' examples use it)
    import sys

    name, out = sys.argv[1:3]
    print(scenario_log(name, Path(out)))
