"""Logs are untrusted (issue #22): a tokenizer folder's code never runs, control characters never reach a terminal."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.bad_input.kit import case, turns_table, write_turns
from tests.support.cli import tito_process
from tests.support.helpers import REPO
from tito_cli.render.visible import one_line, visible

FIXTURE_TOKENIZER = REPO / "fixtures" / "tokenizer"




@pytest.fixture()
def code_tokenizer(tmp_path: Path) -> Path:
    """The fixture tokenizer, plus an ``auto_map`` class whose module leaves a marker file when imported."""
    folder = tmp_path / "shipped-tokenizer"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(FIXTURE_TOKENIZER / name, folder / name)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["tokenizer_class"] = "ShippedTokenizer"
    config["auto_map"] = {"AutoTokenizer": ["tokenization_shipped.ShippedTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "tokenization_shipped.py").write_text(
        "import os\n"
        "open(os.environ['TITO_TEST_MARKER'], 'w').write('the tokenizer folder ran code')\n"
        "from transformers import PreTrainedTokenizerFast\n"
        "class ShippedTokenizer(PreTrainedTokenizerFast):\n"
        "    pass\n"
    )
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("command", ["inspect", "dump", "check", "simulate"])
def test_a_tokenizer_folder_never_runs_code(tmp_path: Path, code_tokenizer: Path, command: str) -> None:
    log = tmp_path / "logs"
    log.mkdir()
    table = turns_table(case("cases-threshold-1024/case-2.7", "s"))
    meta = {**table.schema.metadata, b"tito.tokenizer": str(code_tokenizer).encode()}
    pq.write_table(table.replace_schema_metadata(meta), log / "turns.parquet")
    marker = tmp_path / "marker"
    args = {
        "inspect": ["inspect", "s", "--logs", str(log)],
        "dump": ["dump", str(log), "--out", str(tmp_path / "golden")],
        "check": ["check", str(log), "--golden", str(tmp_path / "golden"), "--update"],
        "simulate": ["simulate", "--out", str(tmp_path / "sim"), "--sessions", "1", "--tokenizer", str(code_tokenizer)],
    }[command]
    # "y" on stdin: what a CI script piping `yes` would answer to transformers' "run the custom code?".
    proc = tito_process(*args, cwd=tmp_path, stdin="y\n" * 5, env={"TITO_TEST_MARKER": str(marker)})
    assert not marker.exists(), proc.stderr
    assert "[y/N]" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    said = " ".join(proc.stderr.split())  # lines may wrap anywhere
    assert "tito never runs code from a tokenizer folder" in said or "custom code" in said, proc.stderr


HOSTILE_ID = "evil\x1b[31mRED\nERROR forged line\x1b]0;title\x07"


@pytest.fixture()
def hostile_log(tmp_path: Path) -> Path:
    log = tmp_path / "logs"
    good = case("cases-threshold-1024/case-2.7", HOSTILE_ID)
    good[0]["prompt_messages"][0]["content"] = "clears the screen \x1b[2J and \u202eturns text around"
    bad = case("cases-threshold-1024/case-3.7", HOSTILE_ID + "-bad")
    bad[1]["output_logprobs"] = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    write_turns(log / "turns.parquet", good + bad)
    return log


@pytest.mark.parametrize(
    "args",
    [
        ["rebuild", "logs", "--out", "samples.parquet"],
        ["ls", "logs"],
        ["stats", "logs"],
        ["inspect", "evil", "--logs", "logs"],  # matches both: the candidates are listed
        ["inspect", HOSTILE_ID, "--logs", "logs"],
        ["check", "logs", "--golden", "golden"],
    ],
    ids=["rebuild-summary", "ls", "stats", "inspect-candidates", "inspect", "check"],
)
def test_control_characters_from_the_log_never_reach_the_terminal(hostile_log: Path, args: list[str]) -> None:
    proc = tito_process(*args, cwd=hostile_log.parent)
    shown = proc.stdout + proc.stderr
    assert "Traceback" not in shown, shown
    assert "\x1b" not in shown and "\x07" not in shown and "\u202e" not in shown, shown
    assert not any(line.startswith("ERROR forged") for line in shown.splitlines()), shown
    assert "evil\\e[31mRED\\nERROR forged line" in shown, shown


def test_the_files_keep_the_exact_ids(hostile_log: Path) -> None:
    proc = tito_process("rebuild", "logs", "--out", "samples.parquet", cwd=hostile_log.parent)
    assert proc.returncode == 3, proc.stderr
    assert set(pq.read_table(hostile_log.parent / "samples.parquet").column("session_id").to_pylist()) == {HOSTILE_ID}
    rejects = (hostile_log.parent / "samples.parquet.rejects.jsonl").read_text(encoding="utf-8")
    assert json.loads(rejects)["session_id"] == HOSTILE_ID + "-bad"


def test_escapes_are_visible_and_one_to_one_enough_to_read() -> None:
    assert visible("a\x1b[1mb\tc\nd\x7f\x9b\u202e") == "a\\e[1mb\tc\nd\\x7f\\x9b\\u202e"
    assert one_line("a\nb\r\tc") == "a\\nb\\r\tc"  # a tab keeps to its line
    assert one_line("plain ✓ text") == "plain ✓ text"
