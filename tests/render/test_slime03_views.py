"""slime-0.3 in what people look at: inspect, ls, stats, dumps, the pytest fixture; and its optional inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE_SLIME03, read_jsonl, write_log
from tito_cli.algorithm.policies import Slime03
from tito_cli.algorithm.session import SessionResult
from tito_cli.errors import EXIT_OK
from tito_cli.pytest_plugin import TitoGolden
from tito_cli.run.corpus import Corpus


def cases_log(root: Path, threshold: int) -> Path:
    folder = CONFORMANCE_SLIME03 / f"cases-threshold-{threshold}"
    logs = root / f"cases-{threshold}"
    if not logs.exists():
        write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"))
    return logs


@pytest.fixture(scope="module")
def logs8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cases_log(tmp_path_factory.mktemp("s03"), 8)


@pytest.fixture(scope="module")
def logs1024(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cases_log(tmp_path_factory.mktemp("s03"), 1024)


def run(*args: str) -> tuple[int, str, str]:
    result = tito(*list(args))
    return result.exit_code, result.stdout, result.stderr


def test_inspect_explains_a_realign_as_whole_response_masked(logs8: Path) -> None:
    code, out, _ = run("inspect", "s03case-realign-2", "--logs", str(logs8), "-p", "slime-0.3")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert "policy slime-0.3, fork threshold 1024, reward full" in lines
    code, out, _ = run(
        "inspect", "s03case-realign-2", "--logs", str(logs8), "--policy", "slime-0.3", "--fork-threshold", "8"
    )
    lines = out.splitlines()
    assert "policy slime-0.3, fork threshold 8, reward full" in lines
    # The 12-id reply of seq 0 is masked whole: trained nowhere, its tokens are seq 1's prompt.
    assert "  0  1  stop         7      12  yes  start: first turn on its path              nowhere" in lines
    assert "  1  2  stop        23       2  yes  realign at 8 (-11): whole response masked  sample 0" in lines
    assert "  flags none" in lines
    assert any("whole response masked by the next turn's realign (12 tokens" in line for line in lines)
    # The default policy on the same turns: the drift of 11 ids is not shorter than 8, so it forks.
    code, out, _ = run("inspect", "s03case-realign-2", "--logs", str(logs8), "--fork-threshold", "8")
    assert "whole response masked" not in out and "fork: drift too long at 8 (-11)" in out
    assert "flags" not in out


def test_inspect_json_carries_the_policy_the_effect_and_the_flags(logs1024: Path) -> None:
    code, out, _ = run("inspect", "s03case-illformed-2", "--logs", str(logs1024), "--policy", "slime-0.3", "--json")
    assert code == EXIT_OK
    data = json.loads(out)
    assert data["session"]["policy"] == {
        "name": "slime-0.3",
        "fork_threshold": 1024,
        "reward_mode": "full",
        "max_sample_tokens": None,
    }
    assert [s["flags"] for s in data["samples"]] == [
        {"truncated": True, "use_tool": True, "ill_formed": True},
        {"truncated": False, "use_tool": True, "ill_formed": False},
    ]
    code, out, _ = run("inspect", "s03case-illformed-2", "--logs", str(logs1024), "--json")
    assert [s["flags"] for s in json.loads(out)["samples"]] == [None, None]


def test_ls_and_stats_say_which_policy(logs8: Path) -> None:
    code, out, err = run("ls", str(logs8), "--policy", "slime-0.3", "--fork-threshold", "8")
    assert code == EXIT_OK
    assert err.endswith("sessions · policy slime-0.3, fork threshold 8, reward full\n")
    code, out, _ = run("stats", str(logs8), "--policy", "slime-0.3", "--fork-threshold", "8", "--json")
    stats = json.loads(out)
    assert stats["policy"]["name"] == "slime-0.3"
    assert list(stats["forks"]["by_cause"]) == ["prompt_region", "before_latest_response", "output_too_long"]
    assert stats["forks"]["by_cause"]["output_too_long"] > 0  # realign-1 and realign-4's 8-id replies
    code, out, _ = run("stats", str(logs8), "--policy", "slime-0.3", "--fork-threshold", "8")
    assert out.splitlines()[0] == "policy slime-0.3, fork threshold 8, reward full"
    assert "  output too long to realign" in out and "drift too long" not in out


def test_dump_shows_policy_flags_rollout_id_and_ill_formed_turns(logs1024: Path) -> None:
    code, out, _ = run(
        "dump", str(logs1024), "--out", "-", "-s", "s03case-illformed-2", "-s", "s03case-rollout-1", "-p", "slime-0.3"
    )
    assert code == EXIT_OK
    assert out.count("policy: slime-0.3, fork threshold 1024, reward full\n") == 2
    assert "  flags: truncated true, use_tool true, ill_formed true\n" in out
    assert "  flags: truncated false, use_tool true, ill_formed false\n" in out
    assert "outcome: reward 0.5, index 13, group index 4, label -, rollout id 41\n" in out
    assert "finish length → (no message) (ill-formed)\n" in out


def test_check_accept_command_repeats_the_policy(logs1024: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    code, out, _ = run("check", str(logs1024), "--golden", str(golden), "-p", "slime-0.3", "--max-sample-tokens", "9")
    assert code != EXIT_OK
    assert f"tito check {logs1024} --golden {golden} --policy slime-0.3 --max-sample-tokens 9 --update" in out


def test_pytest_fixture_takes_a_policy(logs1024: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    golden = tmp_path / "golden"
    run("dump", str(logs1024), "--out", str(golden), "--policy", "slime-0.3", "--reward-mode", "split")
    fixture = TitoGolden(request)
    report = fixture.check(logs1024, golden, policy="slime-0.3", reward_mode="split")
    assert report.ok and report.checks
    fixture.check(logs1024, golden, policy=Slime03(reward_mode="split"))
    with pytest.raises(pytest.fail.Exception, match="CHANGED"):
        fixture.check(logs1024, golden)  # slime-v4: other samples, other headers


def test_ill_formed_absent_null_or_false_is_false(tmp_path: Path) -> None:
    turn = {
        "session_id": "s",
        "seq": 0,
        "prompt_ids": [1, 2],
        "output_ids": [3],
        "prompt_messages": [{"role": "user", "content": "q"}],
        "response_message": {"role": "assistant", "content": "a"},
    }
    write_log(tmp_path / "new", [turn, {**turn, "session_id": "t", "ill_formed": True}])
    # A file written before the column existed, and one whose column holds nulls.
    old = pq.read_table(next((tmp_path / "new").glob("turns-*.parquet")))
    (tmp_path / "old").mkdir()
    pq.write_table(old.drop_columns(["ill_formed"]), tmp_path / "old" / "turns-old.parquet")
    nulls = old.set_column(old.schema.get_field_index("ill_formed"), "ill_formed", pa.nulls(2, pa.bool_()))
    pq.write_table(nulls, tmp_path / "old" / "turns-nulls.parquet")

    def flags(folder: Path) -> dict[str, bool]:
        results = [r for r in Corpus.open([folder]).results(Slime03()) if isinstance(r, SessionResult)]
        return {r.session_id + str(i): s.flags["ill_formed"] for r in results for i, s in enumerate(r.samples)}  # type: ignore[index]

    assert flags(tmp_path / "new") == {"s0": False, "t0": True}
    turn_rows = [row for rows in Corpus.open([tmp_path / "old"]).log.iter_sessions() for row in rows.rows]
    assert [row.ill_formed for row in turn_rows] == [False, False, False, False]


def test_rollout_id_column_for_both_policies(logs1024: Path, tmp_path: Path) -> None:
    expected = {s["session_id"]: s for s in read_jsonl(CONFORMANCE_SLIME03 / "cases-threshold-1024" / "sessions.jsonl")}
    out = tmp_path / "v4.parquet"
    code, _, err = run("rebuild", str(logs1024), "--out", str(out))
    assert code == EXIT_OK, err
    table = pq.read_table(out)
    assert table.schema.field("rollout_id").type == pa.int64()
    for row in table.select(["session_id", "rollout_id"]).to_pylist():
        session = expected[row["session_id"]]
        want = session["rollout_id"] if session.get("rollout_id") is not None else session["index"]
        assert row["rollout_id"] == want, row


@pytest.mark.slow
def test_the_policies_page_shows_real_output() -> None:
    """Each ``$ tito …`` of docs/policies.md, run from the repository root, prints exactly what the page shows."""
    import os
    import re
    import shlex
    import subprocess
    import sys

    from tests.support.helpers import REPO

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"} | {"PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    text = (REPO / "docs" / "policies.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```console\n(.*?)```", text, re.S)
    assert len(blocks) >= 2
    for block in blocks:
        lines = block.splitlines(keepends=True)
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        for n, i in enumerate(starts):
            words = shlex.split(lines[i][2:])
            assert words[0] == "tito"
            shown = "".join(lines[i + 1 : starts[n + 1] if n + 1 < len(starts) else len(lines)])
            got = subprocess.run(
                [sys.executable, "-m", "tito_cli", *words[1:]],
                cwd=REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                check=True,
            ).stdout
            assert got == shown, lines[i]
