"""The samples file is a pure function of the turns and the policy.

Byte-identical across runs, hash seeds (``PYTHONHASHSEED``), and however the
same turns are spread over files, folders, row orders and argument orders.
(Across pyarrow versions the footer's ``created_by`` differs; compare with
one installation.)
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tests.bad_input.kit import turns_table, write_sessions
from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE, REPO, read_jsonl, write_log

FOLDERS = ["cases-threshold-1024", "random-threshold-1024"]


def corpus() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Turns and sessions rows of the conformance folders at the default threshold (ids are distinct)."""
    turns = [t for f in FOLDERS for t in read_jsonl(CONFORMANCE / f / "turns.jsonl")]
    sessions = [s for f in FOLDERS for s in read_jsonl(CONFORMANCE / f / "sessions.jsonl")]
    return turns, sessions


def rebuild_bytes(tmp: Path, *inputs: Path, extra: tuple[str, ...] = ()) -> bytes:
    out = tmp / f"out-{len(list(tmp.glob('out-*')))}.parquet"
    result = tito("rebuild", *map(str, inputs), "--out", str(out), *extra)
    assert result.exit_code == 3, result.output  # the corpus holds one invalid session (case-4.2)
    return out.read_bytes()


def write_shuffled(log: Path, turns: list[dict[str, Any]], sessions: list[dict[str, Any]], seed: int) -> None:
    """The same rows in a random order, cut into random pieces, in a random folder layout."""
    rng = random.Random(seed)
    turns, sessions = turns[:], sessions[:]
    rng.shuffle(turns)
    rng.shuffle(sessions)
    cuts = sorted(rng.sample(range(1, len(turns)), 9))
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(turns)], strict=True)):
        folder = log / rng.choice(["", "z", "a/b", "m/n/o"])
        folder.mkdir(parents=True, exist_ok=True)
        pq.write_table(turns_table(turns[a:b]), folder / f"{rng.randrange(10**6):06d}-{i}.parquet")
    half = len(sessions) // 2
    write_sessions(log / "sessions-late.parquet", sessions[:half])
    write_sessions(log / "a" / "sessions-early.parquet", sessions[half:])


def test_same_bytes_however_the_turns_are_partitioned(tmp_path: Path) -> None:
    turns, sessions = corpus()
    reference = tmp_path / "one-file"
    write_log(reference, turns, sessions, max_rows=100_000)
    assert len(list(reference.glob("turns-*.parquet"))) == 1
    want = rebuild_bytes(tmp_path, reference)

    # Many small flushes.
    small = tmp_path / "small-flushes"
    write_log(small, turns, sessions, max_rows=7)
    assert rebuild_bytes(tmp_path, small) == want

    # Shuffled rows, random cuts, nested folders; then the files given one by one, in reverse.
    for seed in (1, 2):
        log = tmp_path / f"shuffled-{seed}"
        write_shuffled(log, turns, sessions, seed)
        assert rebuild_bytes(tmp_path, log) == want
    files = sorted((tmp_path / "shuffled-1").rglob("*.parquet"), reverse=True)
    assert rebuild_bytes(tmp_path, *files) == want

    # The same log twice over: rebuilt twice, same bytes.
    assert rebuild_bytes(tmp_path, reference) == want


def test_same_bytes_across_hash_seeds(tmp_path: Path) -> None:
    turns, sessions = corpus()
    log = tmp_path / "logs"
    write_log(log, turns, sessions, max_rows=50)
    outputs = []
    for seed in ("0", "1", "4242"):
        out = tmp_path / f"seed-{seed}.parquet"
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
        proc = subprocess.run(
            [sys.executable, "-m", "tito_cli", "rebuild", str(log), "--out", str(out)],
            capture_output=True,
            env=env,
            timeout=120,
        )
        assert proc.returncode == 3, proc.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]


def test_same_bytes_for_any_worker_count(tmp_path: Path) -> None:
    turns, sessions = corpus()
    log = tmp_path / "logs"
    write_log(log, turns, sessions, max_rows=50)
    want = rebuild_bytes(tmp_path, log, extra=("--workers", "1"))
    for workers in ("2", "3"):
        assert rebuild_bytes(tmp_path, log, extra=("--workers", workers)) == want
