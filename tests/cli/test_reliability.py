"""Hostile paths and faults around a rebuild (issue #22): what is read, what is written, and how it fails.

Each test here failed before its fix: a file given as ``--out`` that is also
input, special files and folders as targets, write failures (EFBIG) that
came out as internal errors, and folders that could not be listed.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_input.kit import case, write_good, write_turns
from tests.support.cli import tito
from tests.support.helpers import REPO
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTPUT, EXIT_USAGE

CASE = "cases-threshold-1024/case-2.7"


def run(*args: str) -> tuple[int, str]:
    result = tito(*list(args))
    return result.exit_code, result.stderr


@pytest.fixture()
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    write_good(folder)
    return folder


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.parametrize("how", ["inside-folder", "given-directly", "through-symlink"])
def test_out_naming_an_input_file_is_refused_and_the_file_kept(logs: Path, tmp_path: Path, how: str) -> None:
    turns = logs / "turns-good.parquet"
    before = snapshot(logs)
    if how == "inside-folder":
        args = [str(logs), "--out", str(turns)]
    elif how == "given-directly":
        args = [str(turns), "--out", str(turns)]
    else:
        link = tmp_path / "latest.parquet"
        link.symlink_to(turns)
        args = [str(logs), "--out", str(link)]
    code, stderr = run("rebuild", *args, "--overwrite")
    assert code == EXIT_OUTPUT, stderr
    assert "is one of the input files" in stderr
    assert snapshot(logs) == before  # nothing replaced, no rejects report beside it


def test_a_samples_file_inside_the_log_folder_is_refused(logs: Path) -> None:
    # Written there it would be read as part of the log by every later command (exit 4 from then on, #33).
    before = snapshot(logs)
    code, stderr = run("rebuild", str(logs), "--out", str(logs / "samples.parquet"), "--overwrite")
    assert code == EXIT_OUTPUT and "is inside the folder read" in stderr
    assert snapshot(logs) == before


def test_a_samples_file_given_as_input_and_output_is_refused(logs: Path, tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    assert run("rebuild", str(logs), "--out", str(out))[0] == EXIT_OK
    code, stderr = run("rebuild", str(logs), str(out), "--out", str(out), "--overwrite")
    assert code == EXIT_OUTPUT and "is one of the input files" in stderr


@pytest.mark.parametrize("kind", ["fifo", "folder", "symlink-to-fifo", "fifo-as-rejects-report"])
def test_out_must_be_a_regular_file_or_absent(logs: Path, tmp_path: Path, kind: str) -> None:
    out = tmp_path / "samples.parquet"
    if kind == "fifo":
        os.mkfifo(out)
    elif kind == "folder":
        out.mkdir()
    elif kind == "symlink-to-fifo":
        os.mkfifo(tmp_path / "pipe")
        out.symlink_to(tmp_path / "pipe")
    else:
        os.mkfifo(tmp_path / "samples.parquet.rejects.jsonl")
    code, stderr = run("rebuild", str(logs), "--out", str(out), "--overwrite")
    assert code == EXIT_OUTPUT, stderr
    assert "is a folder" in stderr or "not a regular file" in stderr or "is a symbolic link" in stderr
    if kind == "folder":
        assert out.is_dir() and list(out.iterdir()) == []
    elif kind != "fifo-as-rejects-report":
        assert not out.resolve().is_file()
    assert not (tmp_path / "samples.parquet.rejects.jsonl").is_file()


def _limit_file_size() -> None:
    # EFBIG instead of SIGXFSZ: the write fails as it does on a file system's size limit.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, resource.RLIM_INFINITY))


def test_a_write_failure_is_exit_5_naming_the_output_and_leaves_nothing(tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    demo = REPO / "fixtures" / "logs"  # its samples file is far beyond the 16 KiB limit
    proc = subprocess.run(
        [sys.executable, "-m", "tito_cli", "rebuild", str(demo), "--out", str(out_dir / "samples.parquet")],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_limit_file_size,
        timeout=120,
    )
    assert proc.returncode == EXIT_OUTPUT, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert "samples.parquet: cannot write" in proc.stderr
    assert list(out_dir.iterdir()) == []  # no partial file, no temporary


def test_an_unlistable_folder_is_an_error_naming_it(
    logs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hidden = logs / "more"
    hidden.mkdir()
    if os.geteuid() != 0:
        hidden.chmod(0)
    else:  # root reads any folder: make listing it fail as it does for other users
        real_scandir = os.scandir

        def scandir(path: object = ".") -> object:
            if Path(str(path)) == hidden:
                raise PermissionError(13, "Permission denied", str(path))
            return real_scandir(path)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "scandir", scandir)
    try:
        code, stderr = run("rebuild", str(logs), "--out", str(tmp_path / "samples.parquet"))
    finally:
        hidden.chmod(0o755)
    assert code == EXIT_BAD_INPUT, stderr
    assert f"ERROR {hidden}: cannot list this folder" in stderr
    assert not (tmp_path / "samples.parquet").exists()


# -- golden dumps and the simulator: nothing half-done, nothing of the user's touched --


def test_a_dump_name_clash_writes_nothing(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    # "A" and "a" get the files A.txt and a.txt: one file on a case-insensitive file system.
    # "0-first" sorts before both: before the fix, its dump was written, then the clash stopped the run.
    turns = [*case(CASE, "A"), *case(CASE, "a"), *case(CASE, "0-first")]
    write_turns(log / "turns.parquet", turns)
    golden = tmp_path / "golden"
    code, stderr = run("dump", str(log), "--out", str(golden))
    assert code == EXIT_OUTPUT, stderr
    assert "would share the dump file" in stderr
    assert not golden.exists() or list(golden.iterdir()) == []


def test_check_update_removes_only_stale_dumps(logs: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    assert run("dump", str(logs), "--out", str(golden))[0] == EXIT_OK
    dumps = sorted(p.name for p in golden.iterdir())
    stale = (golden / dumps[0]).read_text(encoding="utf-8")
    (golden / "gone-session.txt").write_text(stale.replace("session: ", "session: gone-", 1), encoding="utf-8")
    (golden / "README.txt").write_text("These dumps are checked by CI.\n", encoding="utf-8")
    (golden / "notes.txt").write_text("", encoding="utf-8")
    code, stderr = run("check", str(logs), "--golden", str(golden), "--update")
    assert code == EXIT_OK, stderr
    assert sorted(p.name for p in golden.iterdir()) == sorted([*dumps, "README.txt", "notes.txt"])
    # Without --update, a file that is not a dump is not reported as stale either.
    assert run("check", str(logs), "--golden", str(golden))[0] == EXIT_OK


def test_simulate_overwrite_keeps_the_old_log_when_the_run_fails(tmp_path: Path) -> None:
    import json
    import shutil

    out = tmp_path / "sim"
    code, stderr = run("simulate", "--out", str(out), "--sessions", "2", "--seed", "1")
    assert code == EXIT_OK, stderr
    before = snapshot(out)
    broken = tmp_path / "broken-tokenizer"
    shutil.copytree(REPO / "fixtures" / "tokenizer", broken)
    config = json.loads((broken / "tokenizer_config.json").read_text())
    config["chat_template"] = "{{ raise_exception('this template fails') }}"
    (broken / "tokenizer_config.json").write_text(json.dumps(config))
    code, stderr = run(
        "simulate", "--out", str(out), "--sessions", "2", "--seed", "2", "--tokenizer", str(broken), "--overwrite"
    )
    assert code == EXIT_USAGE and "the chat template failed (this template fails)" in stderr, stderr
    assert snapshot(out) == before, "the old log must survive a failed --overwrite run"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken-tokenizer", "sim"]  # no staging left
    # A run that works replaces it.
    assert run("simulate", "--out", str(out), "--sessions", "1", "--seed", "3", "--overwrite")[0] == EXIT_OK
    assert snapshot(out) != before and all(not p.name.startswith(".") for p in out.iterdir())
