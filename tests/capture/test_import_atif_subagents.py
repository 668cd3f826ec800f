"""ATIF sub-agents become branches of their parent's session, in both of the format's forms.

A sub-agent is referred to from an observation result's ``subagent_trajectory_ref``: by file
(``trajectory_path``; before ATIF v1.7 also by ``session_id`` alone) or embedded in the parent's
``subagent_trajectories`` and named by ``trajectory_id`` (v1.7).  Either way the import gives one
session: the parent's turns and, right after the step that delegated, the sub-agent's, whose own
first message starts another subtree of the routing tree; the session's reward covers both.  The
fixture pair is the import fixtures' ``atif-tools`` (the parent) and ``atif-chat`` (the sub-agent),
whose ground truth ``tests/import_sources/atif/expected_turns.jsonl`` holds; the rebuild must equal
the spec model's samples of that truth in the order the two ran.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow.parquet as pq

from tests.support.helpers import read_jsonl
from tests.support.spec_model import model_rebuild
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.session import rebuild_session
from tito_cli.capture.importing import import_traces
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild

FIXTURE = Path(__file__).resolve().parent.parent / "import_sources" / "atif"
PARENT, CHILD = "atif-tools", "atif-chat"


def load(sid: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((FIXTURE / "trajectories" / f"{sid}.json").read_text(encoding="utf-8"))
    return doc


def delegating(parent: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """``parent`` with ``ref`` on the first observation result (the tool call after its first agent step)."""
    doc = copy.deepcopy(parent)
    step = next(s for s in doc["steps"] if s.get("observation"))
    step["observation"]["results"][0]["subagent_trajectory_ref"] = [ref]
    return doc


def write(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc), encoding="utf-8")


def assert_one_session_with_branches(sources: list[Path], tmp_path: Path, subagent: str) -> None:
    rewards = tmp_path / "rewards.jsonl"
    rewards.write_text(json.dumps({"session_id": PARENT, "reward": 1.0}) + "\n", encoding="utf-8")
    summary = import_traces("atif", sources, tmp_path / "log", rewards=rewards)
    assert summary.rejected == []
    report = read_jsonl(tmp_path / "log" / "import-report.jsonl")
    assert [(r["session_id"], r["status"], r["turns"]) for r in report] == [(PARENT, "imported", 4)]

    # The order they ran: the parent's first call, the sub-agent's two, the parent's second.
    truth = {
        sid: [t for t in read_jsonl(FIXTURE / "expected_turns.jsonl") if t["session_id"] == sid]
        for sid in (PARENT, CHILD)
    }
    ran = [truth[PARENT][0], *truth[CHILD], truth[PARENT][1]]
    log = TurnLog.open([tmp_path / "log"], index=True)
    [rows] = list(log.iter_sessions())
    turns = parse_session(rows)
    assert [t.prompt_ids.tolist() for t in turns] == [t["prompt_ids"] for t in ran]
    assert [(t.metadata or {}).get("subagent") for t in turns] == [None, subagent, subagent, None]
    result = rebuild_session(PARENT, turns, log.read_sessions().infos[PARENT], SlimeV4())
    assert result.report.leaves == 2  # the sub-agent is a branch of the parent's tree

    rebuild([tmp_path / "log"], tmp_path / "samples.parquet", workers=1)
    samples = pq.read_table(tmp_path / "samples.parquet").to_pylist()
    expected = model_rebuild([SimpleNamespace(**t) for t in ran], 1024, 1.0, "split")
    assert {s["session_id"] for s in samples} == {PARENT}
    assert [s["tokens"] for s in samples] == [e.tokens for e in expected]
    assert [s["loss_mask"] for s in samples] == [e.loss_mask for e in expected]
    assert [s["reward"] for s in samples] == [e.reward for e in expected]
    assert sum(s["reward"] for s in samples) == 1.0  # one reward, shared by the parent's and the sub-agent's samples


def test_a_subagent_by_file_reference_is_a_branch_not_a_session(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories"
    write(folder / "parent.json", delegating(load(PARENT), {"session_id": CHILD, "trajectory_path": "sub/chat.json"}))
    write(folder / "sub" / "chat.json", load(CHILD))
    assert_one_session_with_branches([folder], tmp_path, "sub/chat.json")


def test_a_subagent_by_session_id_among_the_imported_files(tmp_path: Path) -> None:
    """Before ATIF v1.7 a reference could name the sub-agent's session_id alone."""
    folder = tmp_path / "trajectories"
    write(folder / "parent.json", delegating(load(PARENT), {"session_id": CHILD}))
    write(folder / "chat.json", load(CHILD))
    assert_one_session_with_branches([folder], tmp_path, CHILD)


def test_an_embedded_subagent_is_a_branch(tmp_path: Path) -> None:
    parent = delegating(load(PARENT), {"trajectory_id": "child-1", "session_id": PARENT})
    child = {k: v for k, v in load(CHILD).items() if k != "session_id"}
    parent["schema_version"] = "ATIF-v1.7"
    parent["subagent_trajectories"] = [{**child, "trajectory_id": "child-1"}]
    write(tmp_path / "parent.json", parent)
    assert_one_session_with_branches([tmp_path / "parent.json"], tmp_path, "child-1")


def test_a_subagent_not_found_is_reported_and_the_parent_imported(tmp_path: Path) -> None:
    write(tmp_path / "parent.json", delegating(load(PARENT), {"trajectory_id": "absent"}))
    summary = import_traces("atif", [tmp_path / "parent.json"], tmp_path / "log")
    [session] = summary.sessions
    assert session.turns == 2
    assert "sub-agent trajectory not found (absent): its calls are not imported" in session.filled


def test_a_subagent_referring_to_itself_rejects_its_session_only(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories"
    write(folder / "parent.json", delegating(load(PARENT), {"trajectory_path": "loop.json"}))
    write(folder / "loop.json", delegating(load(PARENT), {"trajectory_path": "loop.json"}))
    write(folder / "other.json", load(CHILD))
    summary = import_traces("atif", [folder], tmp_path / "log")
    assert [r.session_id for r in summary.rejected] == [PARENT]
    assert "refers back to itself" in summary.rejected[0].reason
    assert [s.session_id for s in summary.sessions if s.turns] == [CHILD]
