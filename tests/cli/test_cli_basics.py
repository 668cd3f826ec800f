"""What every command shares: --version, -v on either side of the command, exit-status help, hints with brackets."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import typer.main

from tests.support.cli import tito
from tests.support.helpers import REPO
from tito_cli import __version__
from tito_cli.cli import app
from tito_cli.cli.app import _global_flags_first
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OUTPUT, EXIT_USAGE


def test_version() -> None:
    result = tito("--version")
    assert result.exit_code == 0
    assert result.stdout == f"tito {__version__}\n"


def test_the_package_version_is_the_distribution_version() -> None:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'name = "tito-cli"' in pyproject
    assert 'version = { attr = "tito_cli.__version__" }' in pyproject


@pytest.mark.parametrize("verbose_first", [True, False])
def test_verbose_before_or_after_the_command_shows_the_traceback(tmp_path: Path, verbose_first: bool) -> None:
    missing = str(tmp_path / "nowhere")
    args = ["-v", "ls", missing] if verbose_first else ["ls", missing, "-v"]
    result = tito(*args)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert "Traceback" in result.stderr
    assert f"ERROR {missing}: no such log folder" in result.stderr
    quiet = tito("ls", missing)
    assert quiet.exit_code == EXIT_BAD_INPUT
    assert "Traceback" not in quiet.stderr


def test_only_flags_after_the_command_move_and_nothing_after_a_double_dash() -> None:
    commands = {"ls", "inspect"}
    assert _global_flags_first(["ls", "logs", "--verbose", "-v"], commands) == ["--verbose", "-v", "ls", "logs"]
    assert _global_flags_first(["-v", "ls", "logs"], commands) == ["-v", "ls", "logs"]
    assert _global_flags_first(["ls", "--", "-v"], commands) == ["ls", "--", "-v"]
    assert _global_flags_first(["--help"], commands) == ["--help"]


def test_each_command_lists_only_the_exit_statuses_it_can_end_with() -> None:
    group = typer.main.get_command(app)
    helps = {name: command.help for name, command in group.commands.items()}  # type: ignore[attr-defined]
    assert "6 tito check found" in helps["check"]
    for name in ("rebuild", "inspect", "ls", "stats", "dump", "simulate"):
        assert "6 tito check" not in helps[name], name
    for name in ("ls", "stats", "inspect"):
        assert "5 the output cannot be written" not in helps[name], name
    assert "3 output written but some sessions were rejected" in helps["rebuild"]
    assert "3 output written" not in helps["ls"]
    assert "4 a log file" not in helps["simulate"]


def test_install_hints_keep_their_brackets() -> None:
    result = tito("rebuild", "--help", env={"COLUMNS": "200"})
    assert "pip install 'tito-cli[ray]'" in result.stdout


def test_missing_ray_is_a_usage_error_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    logs = REPO / "fixtures" / "logs"
    result = tito("rebuild", str(logs), "--engine", "ray", "--out", str(tmp_path / "out"))
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.splitlines() == [
        "ERROR the ray engine needs Ray Data, which is not installed",
        "TIP pip install 'tito-cli[ray]'  (or: pip install 'ray[data]' aiohttp)",
    ]
    assert not (tmp_path / "out").exists()


def test_error_messages_print_brackets_in_paths_as_they_are(tmp_path: Path) -> None:
    missing = tmp_path / "logs[bold]"
    result = tito("ls", str(missing))
    assert result.exit_code == EXIT_BAD_INPUT
    assert f"ERROR {missing}: no such log folder" in result.stderr


NOT_YET = [
    "no turn-log Parquet file here yet: the folder holds no files but hidden ones, as a log folder does while a "
    "writer (tito serve, TurnLogWriter) has not recorded its first turns",
    "TIP tito serve's turns are readable as soon as they are answered; a TurnLogWriter's first Parquet "
    "file appears at its first flush",
]
NOT_A_LOG = [
    "no turn-log Parquet file found here (searched recursively for *.parquet)",
    "TIP tito reads the Parquet turn logs TurnLogWriter writes (docs/capture.md); "
    "convert logs in another format with tito import",
]


@pytest.mark.parametrize(
    ("content", "expected"),
    [("empty", NOT_YET), ("hidden temporary", NOT_YET), ("jsonl", NOT_A_LOG)],
)
def test_a_folder_without_parquet_logs_is_an_error_and_nothing_is_written(
    tmp_path: Path, content: str, expected: list[str]
) -> None:
    """A folder a writer has not flushed into yet (empty, or its hidden temporaries) is said to be one."""
    logs = tmp_path / "logs"
    logs.mkdir()
    if content == "jsonl":
        (logs / "turns.jsonl").write_text('{"session_id": "a"}\n', encoding="utf-8")
    if content == "hidden temporary":
        (logs / ".turns-0001-3f2a9c1b7d4e.tmp").write_bytes(b"PAR1")
    out = tmp_path / "samples.parquet"
    result = tito("rebuild", str(logs), "--out", str(out))
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert result.stderr.splitlines() == [f"ERROR {logs}: {expected[0]}", expected[1]]
    assert list(tmp_path.iterdir()) == [logs]
    for command in (["ls", str(logs)], ["stats", str(logs)], ["dump", str(logs), "--out", str(tmp_path / "d")]):
        listed = tito(*command)
        assert listed.exit_code == EXIT_BAD_INPUT, command
        assert expected[0] in listed.stderr
    assert list(tmp_path.iterdir()) == [logs]


DEMO_LOGS = REPO / "fixtures" / "logs"
STALE = "tito golden dump (format 1, style full)\nsession: gone\n"


@pytest.fixture(scope="module")
def two_dumps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Goldens of two of the demo sessions."""
    golden = tmp_path_factory.mktemp("two") / "golden"
    two = ["-s", "qwen3-0-0000", "-s", "qwen3-0-0001"]
    first = tito("dump", str(DEMO_LOGS), "--out", str(golden), *two)
    assert first.exit_code == 0, first.output
    return golden


@pytest.fixture
def edited(two_dumps: Path, tmp_path: Path) -> Path:
    """Those goldens with one edited, a stale dump of a session the log lacks, and a file that is no dump."""
    golden = tmp_path / "golden"
    shutil.copytree(two_dumps, golden)
    changed = golden / "qwen3-0-0000.txt"
    changed.write_text(changed.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")
    (golden / "gone.txt").write_text(STALE, encoding="utf-8")
    (golden / "notes.md").write_text("not a dump\n", encoding="utf-8")
    return golden


def test_dump_into_existing_goldens_is_refused_without_update(edited: Path) -> None:
    before = {p.name: p.read_bytes() for p in edited.iterdir()}
    refused = tito("dump", str(DEMO_LOGS), "--out", str(edited))
    assert refused.exit_code == EXIT_OUTPUT
    assert refused.stderr.splitlines()[0] == (
        f"ERROR {edited}: the folder holds golden dumps that this log would change (qwen3-0-0000 changed); "
        "nothing written"
    )
    assert "--update" in refused.stderr
    assert {p.name: p.read_bytes() for p in edited.iterdir()} == before


@pytest.mark.slow
def test_dump_update_rewrites_changed_goldens_and_removes_stale_ones(edited: Path) -> None:
    updated = tito("dump", str(DEMO_LOGS), "--out", str(edited), "--update")
    assert updated.exit_code == 0, updated.output
    assert updated.stderr.strip() == f"wrote 31 of 32 dumps to {edited} (1 already identical, 1 stale removed)"
    assert not (edited / "gone.txt").exists() and (edited / "notes.md").exists()
    assert "edited" not in (edited / "qwen3-0-0000.txt").read_text(encoding="utf-8")
    check = tito("check", str(DEMO_LOGS), "--golden", str(edited))
    assert check.exit_code == 0, check.output


@pytest.mark.slow  # dumps the demo logs three times
def test_dump_into_identical_goldens_is_allowed_but_not_with_a_stale_one(tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    assert tito("dump", str(DEMO_LOGS), "--out", str(golden)).exit_code == 0
    again = tito("dump", str(DEMO_LOGS), "--out", str(golden))  # changes nothing: allowed
    assert again.exit_code == 0, again.output
    assert again.stderr.strip() == f"wrote 0 of 32 dumps to {golden} (32 already identical)"
    (golden / "gone.txt").write_text(STALE, encoding="utf-8")
    left_stale = tito("dump", str(DEMO_LOGS), "--out", str(golden))
    assert left_stale.exit_code == EXIT_OUTPUT
    assert "(gone.txt stale)" in left_stale.stderr


def test_unfinished_sessions_are_marked_named_and_can_be_rejected(tmp_path: Path) -> None:
    import json

    import pyarrow.parquet as pq

    logs = REPO / "fixtures" / "logs"
    # The demo log's one session without a sessions row (its harness "died"), read from the files.
    def session_ids_of(pattern: str) -> set[str]:
        return set(pq.read_table(next(logs.glob(pattern)), columns=["session_id"])["session_id"].to_pylist())

    turn_ids, row_ids = session_ids_of("turns-*.parquet"), session_ids_of("sessions-*.parquet")
    [unfinished] = sorted(turn_ids - row_ids)
    kept = tmp_path / "kept.parquet"
    assert tito("rebuild", str(logs), "--out", str(kept)).exit_code == 0
    table = pq.read_table(kept, columns=["session_id", "reward", "metadata"]).to_pylist()
    finished = {(r["session_id"], json.loads(r["metadata"])["tito"]["finished"]) for r in table}
    assert {sid for sid, done in finished if not done} == {unfinished}
    assert {r["reward"] for r in table if r["session_id"] == unfinished} == {0.0}

    # Named by ls (a field and a filter) and by stats.
    listed = tito("ls", str(logs), "--where", "unfinished", "--json")
    assert [(r["session"], r["unfinished"]) for r in json.loads(listed.stdout)] == [(unfinished, True)]
    stats = tito("stats", str(logs), "--json")
    assert json.loads(stats.stdout)["sessions_without_sessions_row_examples"] == [unfinished]

    rejected = tmp_path / "rejected.parquet"
    result = tito("rebuild", str(logs), "--out", str(rejected), "--unfinished", "reject")
    assert result.exit_code == 3, result.output
    reports = [json.loads(line) for line in Path(f"{rejected}.rejects.jsonl").read_text().splitlines()]
    assert [(r["session_id"], r["reason"]) for r in reports] == [
        (unfinished, "no sessions row: the session was not finished (--unfinished reject)")
    ]
    assert reports[0]["file"].endswith(".parquet") and isinstance(reports[0]["row"], int)
    ids = set(pq.read_table(rejected, columns=["session_id"]).column("session_id").to_pylist())
    assert unfinished not in ids and len(ids) == 31
    listed = tito("ls", str(logs), "--unfinished", "reject", "--where", "unfinished", "--json")
    [row] = json.loads(listed.stdout)
    assert (row["session"], row["unfinished"], row["samples"]) == (unfinished, True, None)
