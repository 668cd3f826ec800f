"""Shared helpers for tests: build turn logs from plain records."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from tito_cli.capture.records import stored_row
from tito_cli.capture.writer import TurnLogWriter

REPO = Path(__file__).resolve().parent.parent.parent
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


class ForeignWriter(TurnLogWriter):
    """The capture writer without the rebuild's rules: it records what another writer may leave in a log.

    Conformance corpora and bad-input cases hold turns a rebuild rejects (a logprob count that
    differs from the output's); they are written as the writer would write them, so that the
    reader sees them where it would see another writer's rows.
    """

    _turn_row = staticmethod(stored_row)


def write_log(
    out_dir: Path,
    turns: Iterable[dict[str, Any]],
    sessions: Iterable[dict[str, Any]] = (),
    **writer_options: Any,
) -> list[Path]:
    """Record turn and session records (conformance JSONL shape) through the capture writer.

    The records may break the rebuild's rules (corpora hold bad-input cases): they are recorded as
    another writer might leave them (:class:`ForeignWriter`); ``contract=True`` holds them to the
    writer's own contract.
    """
    options: dict[str, Any] = {"max_age": None, "name": "test"}
    contract = writer_options.pop("contract", False)
    options.update(writer_options)
    with (TurnLogWriter if contract else ForeignWriter)(out_dir, **options) as writer:
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


# -- conformance corpora ------------------------------------------------------------------


def conformance_log(folder: Path, logs: Path) -> list[str]:
    """A conformance folder's turns written as a log at ``logs``, and the CLI options of its run."""
    # Several small flushes, so each session's turns are spread over files.  The writer keeps
    # the message JSON's number types (json.dumps writes 1.0 as 1.0): slime-0.3's identity cases need them.
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    options = ["--fork-threshold", (folder / "threshold").read_text().strip()]
    cap = folder / "max_sample_tokens"
    if cap.is_file():
        options += ["--max-sample-tokens", cap.read_text().strip()]
    return options


def assert_samples_match_expected(
    folder: Path,
    rows: list[dict[str, Any]],
    check_sample: Callable[[dict[str, Any], dict[str, Any], str], None],
) -> None:
    """Samples rows (in file order) against the folder's ``expected.jsonl``, every failure naming the session.

    The same sessions (those with no samples are absent from both), in
    session-id order, each with the same samples: index, tokens, response
    length, loss mask, logprobs and reward; ``check_sample(row, expected,
    where)`` adds what the corpus's policy checks besides.
    """
    got: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        got.setdefault(row["session_id"], []).append(row)
    expected = {e["session_id"]: e["samples"] for e in read_jsonl(folder / "expected.jsonl")}
    assert sorted(got) == sorted(sid for sid, samples in expected.items() if samples)
    assert [r["session_id"] for r in rows] == sorted(r["session_id"] for r in rows)
    for sid, samples in expected.items():
        assert_rows_match_samples(sid, got.get(sid, []), samples, check_sample)


def assert_rows_match_samples(
    sid: str,
    rows: list[dict[str, Any]],
    samples: list[dict[str, Any]],
    check_sample: Callable[[dict[str, Any], dict[str, Any], str], None] | None = None,
) -> None:
    """One session's samples rows against the reference's samples, field by field, naming session and sample."""
    assert len(rows) == len(samples), sid
    for i, (a, e) in enumerate(zip(rows, samples, strict=True)):
        where = f"{sid} sample {i}"
        assert a["sample_index"] == i, where
        assert a["tokens"] == e["tokens"], where
        assert a["response_length"] == e["response_length"], where
        assert a["loss_mask"] == e["loss_mask"], where
        # The samples column is float32; the reference's values are compared at that precision.
        assert a["rollout_log_probs"] == np.asarray(e["rollout_log_probs"], np.float32).tolist(), where
        assert a["reward"] == e["reward"], where
        if check_sample is not None:
            check_sample(a, e, where)


def needs(module: str, extra: str, *, module_level: bool = False) -> ModuleType:
    """``module``, imported; when it is missing the test skips naming the extra that installs it.

    Under ``CI`` (which installs every extra) a missing module is a failure, never a skip that
    would hide a regression.  ``module_level``: called at the top of a test module.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        message = f"needs {module}: pip install 'tito-cli[{extra}]'"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI installs every extra)", pytrace=False)
        pytest.skip(message, allow_module_level=module_level)


def assert_copy_matches_shared(copy: Path, shared: Path) -> None:
    """The project's copy of a corpus equals the one in ../shared; without ../shared it skips, only outside CI."""
    if not shared.is_dir():
        # CI always has ../shared beside the clone: there a missing corpus is a failure, not a skip.
        if os.environ.get("CI"):
            pytest.fail(f"{shared} is not beside the repository (CI must provide ../shared)")
        pytest.skip(f"{shared} is not beside the repository")
    mine = {p.relative_to(copy): p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    theirs = {p.relative_to(shared): p.read_bytes() for p in shared.rglob("*") if p.is_file()}
    assert sorted(mine) == sorted(theirs)
    assert [p for p in sorted(mine) if mine[p] != theirs[p]] == []
