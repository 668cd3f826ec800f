"""`tito rebuild` end to end: output, rejects, unreadable files, overwrite, summary."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE, read_jsonl, write_log
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTPUT, EXIT_REJECTED

CASES = CONFORMANCE / "cases-threshold-1024"


@pytest.fixture()
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    write_log(folder, read_jsonl(CASES / "turns.jsonl"), read_jsonl(CASES / "sessions.jsonl"), max_rows=50)
    return folder


def run(*args: str) -> tuple[int, str, str]:
    result = tito(*list(args))
    return result.exit_code, result.stdout, result.stderr


def test_invalid_session_is_rejected_and_the_rest_written(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    code, stdout, stderr = run("rebuild", str(logs), "--out", str(out))
    assert code == EXIT_REJECTED
    assert stdout == ""  # diagnostics go to stderr
    (reject,) = read_jsonl(tmp_path / "samples.parquet.rejects.jsonl")
    assert reject["session_id"] == "case-4.2"
    assert reject["reason"].startswith("output_logprobs length differs from output_ids length")
    assert Path(reject["file"]).parent == logs and isinstance(reject["row"], int)
    table = pq.read_table(out)
    sessions = set(table.column("session_id").to_pylist())
    expected = {e["session_id"] for e in read_jsonl(CASES / "expected.jsonl") if e["samples"]}
    assert sessions == expected and "case-4.2" not in sessions
    assert "case-4.2" in stderr and "rejected sessions" in stderr


def test_summary_counts(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    _, _, stderr = run("rebuild", str(logs), "--out", str(out))
    lines = {" ".join(line.split()[:-1]): line.split()[-1] for line in stderr.splitlines() if line.strip()}
    table = pq.read_table(out)
    assert lines["sessions rebuilt"] == "29"
    assert int(lines["samples"]) == table.num_rows
    trained = sum(sum(m) for m in table.column("loss_mask").to_pylist())
    assert int(lines["trained tokens"].replace(",", "")) == trained
    causes = ("in the prompt region", "before the latest response", "drift too long")
    assert int(lines["forks"]) == sum(int(lines[k]) for k in causes)
    assert int(lines["realigns"]) > 0 and int(lines["rewrite merges"]) > 0
    assert lines["rejected sessions"] == "1"


def test_output_schema_and_provenance(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    run("rebuild", str(logs), "--out", str(out), "--reward-mode", "full")
    schema = pq.read_schema(out)
    assert schema.metadata[b"tito.table"] == b"samples"
    assert json.loads(schema.metadata[b"tito.policy"]) == {
        "name": "slime-v4",
        "fork_threshold": 1024,
        "reward_mode": "full",
        "max_sample_tokens": None,
    }
    assert [str(schema.field(n).type) for n in ("tokens", "loss_mask", "rollout_log_probs")] == [
        "list<element: int32>",
        "list<element: int8>",
        "list<element: float>",
    ]
    rows = pq.read_table(out).to_pylist()
    for row in rows:
        assert len(row["loss_mask"]) == len(row["rollout_log_probs"]) == row["response_length"]
        prov = json.loads(row["metadata"])["tito"]
        assert set(prov) == {"leaf", "segment", "turns", "trained_turns", "fork", "finished"}
        assert set(prov["trained_turns"]) <= set(prov["turns"])
    rewards = {r["session_id"]: r["reward"] for r in read_jsonl(CASES / "sessions.jsonl")}
    assert all(row["reward"] == rewards[row["session_id"]] for row in rows)


def test_existing_output_is_kept_without_overwrite(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    out.write_bytes(b"previous")
    code, _, stderr = run("rebuild", str(logs), "--out", str(out))
    assert code == EXIT_OUTPUT
    assert "output exists" in stderr and "--overwrite" in stderr
    assert out.read_bytes() == b"previous"
    code, _, _ = run("rebuild", str(logs), "--out", str(out), "--overwrite")
    assert code == EXIT_REJECTED and pq.read_table(out).num_rows > 0


def test_truncated_parquet_aborts_naming_the_file(logs: Path, tmp_path: Path) -> None:
    victim = sorted(logs.glob("turns-*.parquet"))[0]
    data = victim.read_bytes()
    victim.write_bytes(data[: len(data) // 2])
    out = tmp_path / "samples.parquet"
    code, _, stderr = run("rebuild", str(logs), "--out", str(out))
    assert code == EXIT_BAD_INPUT
    assert str(victim) in stderr and "ERROR" in stderr and "Traceback" not in stderr
    assert not out.exists() and not (tmp_path / "samples.parquet.rejects.jsonl").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]  # no temporary file left either


def test_missing_input_and_bad_options(tmp_path: Path) -> None:
    code, _, stderr = run("rebuild", str(tmp_path / "nope"), "--out", str(tmp_path / "o.parquet"))
    assert code == EXIT_BAD_INPUT and "no such file or directory" in stderr
    code, _, _ = run("rebuild", str(tmp_path), "--out", str(tmp_path / "o.parquet"), "--reward-mode", "half")
    assert code == 2
    code, _, _ = run("rebuild", str(tmp_path), "--out", str(tmp_path / "o.parquet"), "--fork-threshold", "-1")
    assert code == 2


def test_clean_log_exits_zero_and_writes_an_empty_rejects_report(tmp_path: Path) -> None:
    turns = [t for t in read_jsonl(CASES / "turns.jsonl") if t["session_id"] != "case-4.2"]
    write_log(tmp_path / "logs", turns)
    out = tmp_path / "samples.parquet"
    code, _, stderr = run("rebuild", str(tmp_path / "logs"), "--out", str(out))
    assert code == EXIT_OK
    assert (tmp_path / "samples.parquet.rejects.jsonl").read_text() == ""
    # No sessions rows were written: every session is counted, reward 0.0.
    assert "sessions without a sessions row" in stderr
    assert set(pq.read_table(out).column("reward").to_pylist()) == {0.0}


def test_installed_entry_point_runs(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    proc = subprocess.run(
        [sys.executable, "-m", "tito_cli", "rebuild", str(logs), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == EXIT_REJECTED, proc.stderr
    assert "\x1b[" not in proc.stderr  # not a terminal: no ANSI codes
    assert "sessions rebuilt" in proc.stderr and out.exists()


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib
    import io

    from rich.console import Console

    # The module, not the Typer object the package exports under the same name.
    app_module = importlib.import_module("tito_cli.cli.app")

    calls: list[tuple[int, int]] = []
    with app_module.progress_bar("rebuilding", "sessions") as progress:
        assert progress is None  # pytest's stderr is not a terminal
    screen = io.StringIO()
    monkeypatch.setattr(app_module, "err_console", Console(file=screen, force_terminal=True, width=100))
    with app_module.progress_bar("rebuilding", "sessions") as progress:
        assert progress is not None
        for done in range(1, 4):
            progress(done, 3)
            calls.append((done, 3))
    assert "rebuilding" in screen.getvalue() and "3/3" in screen.getvalue() and calls


def test_an_output_inside_the_log_folder_is_refused(logs: Path, tmp_path: Path) -> None:
    # Written there, it would be read back by every later command on the folder (exit 4 from then on, #33);
    # also when the folder is reached through a link.
    out = logs / "samples.parquet"
    (tmp_path / "link").symlink_to(logs)
    for log in (logs, tmp_path / "link"):
        code, _, stderr = run("rebuild", str(log), "--out", str(out), "--overwrite")
        assert code == EXIT_OUTPUT and "is inside the folder read" in stderr, stderr
    assert not out.exists()
