"""Golden dumps: the format, ``tito dump`` / ``tito check``, the pytest plugin, and our own goldens."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import typer.main

from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE, CONFORMANCE_SLIME03, REPO, conformance_folders, read_jsonl, write_log
from tito_cli.cli import app
from tito_cli.errors import EXIT_CHECK_FAILED, EXIT_OK, EXIT_USAGE
from tito_cli.golden.compare import Status
from tito_cli.golden.serialize import token_label
from tito_cli.pytest_plugin import TitoGolden
from tito_cli.tokenizer import TokenText

GOLDEN = REPO / "tests" / "golden"
CASES = CONFORMANCE / "cases-threshold-1024"

pytest_plugins = ["pytester"]




@pytest.fixture
def cases_log(tmp_path: Path) -> Path:
    """The named behaviour cases (threshold 1024 = the default), as a turn log."""
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(CASES / "turns.jsonl"), read_jsonl(CASES / "sessions.jsonl"), max_rows=29)
    return logs


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


# -- our own goldens ------------------------------------------------------------

FOLDERS = conformance_folders()


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_conformance_compact_goldens(folder: Path, tmp_path: Path, tito_golden: TitoGolden) -> None:
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"))
    threshold = int((folder / "threshold").read_text())
    report = tito_golden.check(logs, GOLDEN / "conformance" / folder.name, fork_threshold=threshold, style="compact")
    # Every session with turns is dumped, rejected ones too.
    checked = {c.session_id for c in report.checks if c.status is not Status.STALE}
    assert checked == {t["session_id"] for t in read_jsonl(folder / "turns.jsonl")}


SLIME03_FOLDERS = conformance_folders(CONFORMANCE_SLIME03)


@pytest.mark.slow
@pytest.mark.parametrize("folder", SLIME03_FOLDERS, ids=[f.name for f in SLIME03_FOLDERS])
def test_slime03_compact_goldens(folder: Path, tmp_path: Path, tito_golden: TitoGolden) -> None:
    """The slime-0.3 corpus's dumps under its policy: a change to what slime-0.3 gives shows as a diff here."""
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"))
    cap = folder / "max_sample_tokens"
    report = tito_golden.check(
        logs,
        GOLDEN / "conformance-slime03" / folder.name,
        policy="slime-0.3",
        fork_threshold=int((folder / "threshold").read_text()),
        max_sample_tokens=int(cap.read_text()) if cap.is_file() else None,
        style="compact",
    )
    checked = {c.session_id for c in report.checks if c.status is not Status.STALE}
    assert checked == {t["session_id"] for t in read_jsonl(folder / "turns.jsonl")}


# -- the dump format --------------------------------------------------------------

CASE_1_2 = """\
tito golden dump (format 2, style full)
session: case-1.2
policy: slime-v4, fork threshold 1024, reward split
tokenizer: none (token ids)
outcome: reward 1.0, index 0, group index -, label -

== turns (2) ==
seq 0: turn 1, prompt 7 tokens / 2 messages, output 2 tokens, no logprobs, finish tool_calls → call
seq 1: turn 2, prompt 13 tokens / 4 messages, output 2 tokens, no logprobs, finish stop → done

== tree (leaves: 1) ==
system S
user compute
assistant [turn 1, seq 0] call
tool 4
assistant [turn 2, seq 1] done

== packing ==
leaf 0, seq 0: start, lcp 0, drift 0, trained
leaf 0, seq 1: clean, lcp 9, drift 0, trained

== drift (0) ==

== samples (1; segments dropped: 0) ==

sample 0: leaf 0, segment 0, 15 tokens (prompt 7, response 8), 4 trained, reward 1.0
  turns seq 0 1; trained seq 0 1; starts at fork: -
  digest e4d1fa3db831e198
  prompt                     | 1000 1012 1009 2000 2012 2009 9000
  out seq 0            TRAIN | 9101 9009
  tail seq 1                 | 3000 3011 3009 9000
  out seq 1            TRAIN | 9102 9009
"""


def test_full_dump_of_one_session(cases_log: Path) -> None:
    result = tito("dump", cases_log, "--out", "-", "--session", "case-1.2")
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout == CASE_1_2


def test_compact_dump_marks_trained_tokens_in_brackets(cases_log: Path) -> None:
    result = tito("dump", cases_log, "--out", "-", "--session", "case-1.2", "--style", "compact")
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout.splitlines()[-2:] == [
        "samples: 1",
        "sample 0 (response 8, reward 1.0): 1000 1012 1009 2000 2012 2009 9000 [9101] [9009] "
        "3000 3011 3009 9000 [9102] [9009]",
    ]


def test_rejected_session_is_dumped_with_its_reason_and_no_paths(cases_log: Path) -> None:
    result = tito("dump", cases_log, "--out", "-", "--session", "case-4.2")
    assert result.exit_code == EXIT_OK, result.output
    last = result.stdout.splitlines()[-1]
    assert last.startswith("rejected: output_logprobs length differs from output_ids length")
    assert str(cases_log) not in result.stdout and str(cases_log.parent) not in result.stdout


class _FakeTokenizer:
    """Decodes a few ids to awkward strings; enough to test how tokens become words."""

    pieces: ClassVar[dict[int, str]] = {1: " foo", 2: "\n", 3: "\t\tx", 4: "", 5: "a\u00a0b", 6: "bar\n", 7: "\u200b"}

    def decode(self, ids: list[int], **_: Any) -> str:
        return "".join(self.pieces[i] for i in ids)

    def __len__(self) -> int:
        return max(self.pieces) + 1  # ids 0..7, as a real vocabulary's are 0..len-1


def test_token_words_are_space_free_and_show_invisible_characters() -> None:
    tokens = TokenText(_FakeTokenizer(), "fake")
    words = [token_label(tokens, i) for i in range(1, 8)]
    assert words == ["␣foo", "↵", "⇥⇥x", "∅", "a\\u00a0b", "bar↵", "\\u200b"]
    assert all(w and " " not in w for w in words)
    assert token_label(TokenText(None), 42) == "42"


def test_dump_is_identical_across_runs_file_layouts_and_row_order(tmp_path: Path) -> None:
    turns = read_jsonl(CASES / "turns.jsonl")
    sessions = read_jsonl(CASES / "sessions.jsonl")
    write_log(tmp_path / "one", turns, sessions, max_rows=10_000)
    # Reversed row order over many small files: seq alone orders a session's turns.
    write_log(tmp_path / "many", list(reversed(turns)), sessions, max_rows=7)
    first = tito("dump", tmp_path / "one", "--out", "-")
    again = tito("dump", tmp_path / "one", "--out", "-")
    other = tito("dump", tmp_path / "many", "--out", "-")
    assert first.exit_code == EXIT_OK, first.output
    assert first.stdout_bytes == again.stdout_bytes == other.stdout_bytes
    assert first.stdout.count("tito golden dump (format 2") == len(sessions)


def test_dump_does_not_depend_on_the_hash_seed(cases_log: Path) -> None:
    outputs = []
    for seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "NO_COLOR": "1"}
        proc = subprocess.run(
            [sys.executable, "-m", "tito_cli", "dump", str(cases_log), "--out", "-"],
            cwd=REPO,
            env=env,
            capture_output=True,
            check=True,
        )
        outputs.append(proc.stdout)
    assert outputs[0] == outputs[1] and outputs[0]


# -- tito dump / tito check --------------------------------------------------------


def test_dump_then_check_passes(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    result = tito("dump", cases_log, "--out", golden)
    assert result.exit_code == EXIT_OK, result.output
    assert result.stderr == "wrote 30 of 30 dumps to " + str(golden) + " (0 already identical)\n"
    assert len(list(golden.glob("*.txt"))) == 30
    result = tito("check", cases_log, "--golden", golden)
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout == f"golden check passed: 30 passed ({golden})\n"
    result = tito("dump", cases_log, "--out", golden)
    assert result.stderr.endswith("(30 already identical)\n")


def inject_drift(log_dir: Path, session_id: str, seq: int, position: int, token: int) -> None:
    """Rewrite one turn's prompt id in place in the Parquet log (a re-tokenized history)."""
    for path in sorted(log_dir.glob("turns-*.parquet")):
        table = pq.read_table(path)
        rows = table.to_pylist()
        hit = [r for r in rows if r["session_id"] == session_id and r["seq"] == seq]
        if hit:
            hit[0]["prompt_ids"][position] = token
            pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), path)
            return
    raise AssertionError("turn not found")


def test_drift_fails_check_with_a_span_diff_and_update_accepts_it(tmp_path: Path) -> None:
    # Format 1, so that one prompt id is edited in that turn alone (in format 2 later turns share it).
    cases_log = tmp_path / "logs"
    write_log(cases_log, read_jsonl(CASES / "turns.jsonl"), read_jsonl(CASES / "sessions.jsonl"), max_rows=29, format=1)
    golden = tmp_path / "golden"
    assert tito("dump", cases_log, "--out", golden).exit_code == EXIT_OK
    before = snapshot(golden)
    # case-1.2, seq 1 replays seq 0's output (9101 9009) at positions 7-8; re-tokenize its first token.
    inject_drift(cases_log, "case-1.2", seq=1, position=7, token=7001)

    result = tito("check", cases_log, "--golden", golden)
    assert result.exit_code == EXIT_CHECK_FAILED, result.output
    out = result.stdout.splitlines()
    assert out[0] == f"CHANGED  case-1.2: the rebuilt dump differs from {golden / 'case-1.2.txt'}"
    assert "case-1.1" not in result.stdout and "case-2" not in result.stdout
    changed = [line for line in out if line[:1] in ("-", "+") and not line.startswith(("---", "+++"))]
    assert changed == [
        "-leaf 0, seq 1: clean, lcp 9, drift 0, trained",
        "+leaf 0, seq 1: realign, lcp 7, drift 2, trained",
        "-== drift (0) ==",
        "+== drift (1) ==",
        "+leaf 0, seq 1: realign at 7, drift 2, unclassified",
        "+  held:   1000 1012 1009 2000 2012 2009 9000 ▸ 9101 9009",
        "+  prompt: 1000 1012 1009 2000 2012 2009 9000 ▸ 7001 9009 3000 3011 3009 9000",
        "-sample 0: leaf 0, segment 0, 15 tokens (prompt 7, response 8), 4 trained, reward 1.0",
        "+sample 0: leaf 0, segment 0, 15 tokens (prompt 7, response 8), 2 trained, reward 1.0",
        "-  digest e4d1fa3db831e198",
        changed[10],
        "-  out seq 0            TRAIN | 9101 9009",
        "-  tail seq 1                 | 3000 3011 3009 9000",
        "+  out seq 0            TRAIN |",
        "+  tail seq 1                 | 7001 9009 3000 3011 3009 9000",
    ]
    assert changed[10].startswith("+  digest ") and changed[10] != "+  digest e4d1fa3db831e198"
    # Unchanged lines around the change are context only; the rest is collapsed.
    assert "   out seq 1            TRAIN | 9102 9009" in out
    assert any(line.startswith("⋯ ") and line.endswith(" unchanged lines ⋯") for line in out)
    accept = f"tito check {cases_log} --golden {golden} --update"
    assert out[-3:] == [
        f"golden check FAILED: 29 passed, 1 changed ({golden})",
        "accept the rebuilt dumps with:",
        f"  {accept}",
    ]
    assert snapshot(golden) == before  # a failing check writes nothing

    result = tito(*shlex.split(accept)[1:])
    assert result.exit_code == EXIT_OK, result.output
    assert result.stdout.splitlines() == [
        f"updated  case-1.2: {golden / 'case-1.2.txt'}",
        f"golden dumps updated in {golden}: 29 passed, 1 changed",
    ]
    result = tito("check", cases_log, "--golden", golden)
    assert result.exit_code == EXIT_OK, result.output


def test_missing_golden_fails_and_update_adds_it(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    tito("dump", cases_log, "--out", golden)
    (golden / "case-1.3.txt").unlink()
    result = tito("check", cases_log, "--golden", golden)
    assert result.exit_code == EXIT_CHECK_FAILED
    out = result.stdout.splitlines()
    assert out[0] == f"NEW      case-1.3: no golden dump ({golden / 'case-1.3.txt'} does not exist)"
    assert out[-3] == f"golden check FAILED: 29 passed, 1 new ({golden})"
    result = tito("check", cases_log, "--golden", golden, "--update")
    assert result.exit_code == EXIT_OK
    assert result.stdout.splitlines()[0] == f"added    case-1.3: {golden / 'case-1.3.txt'}"
    assert (golden / "case-1.3.txt").is_file()


def test_stale_golden_fails_and_update_removes_it(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    tito("dump", cases_log, "--out", golden)
    stale = golden / "case-gone.txt"
    stale.write_text((golden / "case-1.1.txt").read_text().replace("case-1.1", "case-gone"))
    (golden / "README.md").write_text("not a dump")  # other files are not dumps
    result = tito("check", cases_log, "--golden", golden)
    assert result.exit_code == EXIT_CHECK_FAILED
    out = result.stdout.splitlines()
    assert out[0] == f"STALE    case-gone: {stale} has no session in the log"
    assert out[-3] == f"golden check FAILED: 30 passed, 1 stale ({golden})"
    # Checking only some sessions cannot tell what is stale.
    assert tito("check", cases_log, "--golden", golden, "--session", "case-1.1").exit_code == EXIT_OK
    result = tito("check", cases_log, "--golden", golden, "--update")
    assert result.exit_code == EXIT_OK
    assert result.stdout.splitlines()[0] == f"removed  case-gone: {stale}"
    assert not stale.exists() and (golden / "README.md").exists()


def test_nothing_is_written_without_update_even_on_ci(
    cases_log: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    golden = tmp_path / "golden"
    result = tito("check", cases_log, "--golden", golden)
    assert result.exit_code == EXIT_CHECK_FAILED
    assert result.stdout.splitlines()[-4:-2] == [
        f"golden check FAILED: 0 passed, 30 new ({golden})",
        f"(the golden folder {golden} does not exist)",
    ]
    assert not golden.exists()  # not even created
    tito("dump", cases_log, "--out", golden)
    (golden / "case-1.1.txt").write_text("edited\n")
    before = snapshot(golden)
    assert tito("check", cases_log, "--golden", golden).exit_code == EXIT_CHECK_FAILED
    assert snapshot(golden) == before
    assert tito("check", cases_log, "--golden", golden, "--update").exit_code == EXIT_OK
    assert snapshot(golden) != before


def test_json_result(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    tito("dump", cases_log, "--out", golden)
    (golden / "case-1.1.txt").write_text("edited\n")
    result = tito("check", cases_log, "--golden", golden, "--json")
    assert result.exit_code == EXIT_CHECK_FAILED
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["counts"] == {"passed": 29, "changed": 1, "new": 0, "stale": 0}
    changed = [s for s in data["sessions"] if s["status"] == "changed"]
    assert [s["session_id"] for s in changed] == ["case-1.1"]
    assert changed[0]["diff"][:3] == [
        f"--- golden  {golden / 'case-1.1.txt'}",
        "+++ rebuilt case-1.1",
        "@@ -1,1 +1,26 @@",
    ]
    assert changed[0]["diff"][3] == "-edited"
    assert data["accept_command"] == f"tito check {cases_log} --golden {golden} --update"


def test_diff_lines_cap(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    tito("dump", cases_log, "--out", golden)
    (golden / "case-1.1.txt").write_text("edited\n")
    result = tito("check", cases_log, "--golden", golden, "--diff-lines", "5")
    out = result.stdout.splitlines()
    assert out[1:7] == [
        f"--- golden  {golden / 'case-1.1.txt'}",
        "+++ rebuilt case-1.1",
        "@@ -1,1 +1,26 @@",
        "-edited",
        "+tito golden dump (format 2, style full)",
        "⋯ 25 more diff lines (--diff-lines 0 shows them all) ⋯",
    ]
    result = tito("check", cases_log, "--golden", golden, "--diff-lines", "0")
    assert "+  out seq 0            TRAIN | 9100 9009" in result.stdout.splitlines()


def test_check_uses_the_options_in_the_accept_command(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    result = tito(
        "check", cases_log, "--golden", golden, "--fork-threshold", "8", "--style", "compact", "-s", "case-1.1"
    )
    assert result.exit_code == EXIT_CHECK_FAILED
    command = result.stdout.splitlines()[-1].strip()
    assert command == (
        f"tito check {cases_log} --golden {golden} --fork-threshold 8 --style compact --session case-1.1 --update"
    )
    assert tito(*shlex.split(command)[1:]).exit_code == EXIT_OK
    assert [p.name for p in golden.iterdir()] == ["case-1.1.txt"]
    assert "policy: slime-v4, fork threshold 8, reward split" in (golden / "case-1.1.txt").read_text()


def test_unknown_session_is_a_usage_error(cases_log: Path, tmp_path: Path) -> None:
    result = tito("check", cases_log, "--golden", tmp_path / "g", "--session", "case-9")
    assert result.exit_code == EXIT_USAGE
    assert result.stderr.startswith("ERROR no session matches 'case-9'")


def test_recorded_tokenizer_must_be_found(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(CASES / "turns.jsonl")[:2], tokenizer="no/such/tokenizer")
    result = tito("dump", logs, "--out", tmp_path / "g")
    assert result.exit_code == EXIT_USAGE
    error, tip = result.stderr.splitlines()
    assert error == (
        "ERROR the log's tokenizer 'no/such/tokenizer' is not found here (tried the folder no/such/tokenizer "
        f"from {logs} (and above) and the working directory; tito's shipped tokenizers (qwen3, small))"
    )
    assert tip.startswith("TIP pass --tokenizer PATH (a folder with tokenizer.json), or --tokenizer NAME=PATH")
    assert tip.endswith("; or pass --no-decode to dump token ids")
    assert not (tmp_path / "g").exists()
    result = tito("dump", logs, "--out", "-", "--no-decode")
    assert result.exit_code == EXIT_OK
    assert "tokenizer: none (token ids)" in result.stdout


# -- the pytest plugin --------------------------------------------------------------


def test_pytest_plugin_fails_then_update_then_passes(pytester: pytest.Pytester, cases_log: Path) -> None:
    golden = pytester.path / "golden"
    pytester.makepyfile(
        test_agent=f"""
        def test_samples(tito_golden):
            tito_golden.check({str(cases_log)!r}, {str(golden)!r}, sessions=["case-1.2", "case-1.3"])
        """
    )
    # Only our plugin: other installed plugins (hypothesis) make each inner run seconds slower.
    plugins = ("-p", "tito_cli.pytest_plugin", "-p", "no:hypothesispytest", "-p", "no:cacheprovider")
    result = pytester.runpytest_inprocess(*plugins)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "NEW      case-1.2: no golden dump*",
            "golden check FAILED: 0 passed, 2 new*",
            "accept the rebuilt dumps with:",
            "  *pytest test_agent.py::test_samples --tito-update",
        ]
    )
    assert not golden.exists()

    result = pytester.runpytest_inprocess(*plugins, "--tito-update")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tito golden dumps updated (2)*", "new: *case-1.2.txt", "new: *case-1.3.txt"])
    assert sorted(p.name for p in golden.iterdir()) == ["case-1.2.txt", "case-1.3.txt"]

    result = pytester.runpytest_inprocess(*plugins)
    result.assert_outcomes(passed=1)


# -- documentation ------------------------------------------------------------------


@pytest.mark.parametrize("command", ["dump", "check"])
def test_every_option_is_documented(command: str) -> None:
    docs = (REPO / "docs" / "golden.md").read_text()
    assert f"tito {command}" in docs
    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    assert len(params) > 5
    for param in params:
        if param.param_type_name == "option":
            assert param.help, (command, param.name)
            long_name = next(o for o in param.opts if o.startswith("--"))
            assert long_name in docs, f"{long_name} of tito {command} is not in docs/golden.md"


# -- decoded dumps (the fixture tokenizer) ------------------------------------------

TOKENIZER = REPO / "fixtures" / "tokenizer"


def test_decoded_dump_shows_text_lines_per_span(tmp_path: Path) -> None:
    tok = TokenText.open(str(TOKENIZER)).tokenizer

    def enc(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    p0 = enc(
        "<|im_start|>system\nYou are a coding agent.<|im_end|>\n<|im_start|>user\nList  files\tplease<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    o0 = enc("Sure.\nDone.<|im_end|>")
    tail = enc("\n<|im_start|>user\nthanks<|im_end|>\n<|im_start|>assistant\n")
    msgs = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "List  files\tplease"},
    ]
    a0 = {"role": "assistant", "content": "Sure.\nDone."}
    turns = [
        {"session_id": "tok-1", "prompt_ids": p0, "output_ids": o0, "prompt_messages": msgs, "response_message": a0},
        {
            "session_id": "tok-1",
            "prompt_ids": p0 + o0 + tail,
            "output_ids": enc("Bye.<|im_end|>"),
            "prompt_messages": [*msgs, a0, {"role": "user", "content": "thanks"}],
            "response_message": {"role": "assistant", "content": "Bye."},
        },
    ]
    # An absolute recorded path must not leak into the dump (it differs between machines).
    write_log(tmp_path / "logs", turns, tokenizer=str(TOKENIZER))
    result = tito("dump", tmp_path / "logs", "--out", "-")
    assert result.exit_code == EXIT_OK, result.output
    lines = result.stdout.splitlines()
    assert lines[3] == "tokenizer: tokenizer (vocabulary 3729)"
    assert str(REPO) not in result.stdout
    assert lines[lines.index("  digest 1d67a5718f066dbf") + 1 :] == [
        "  prompt                     | <|im_start|> s ys tem ↵",
        "  prompt                     | You ␣are ␣a ␣co d ing ␣agent . <|im_end|> ↵",
        "  prompt                     | <|im_start|> user ↵",
        "  prompt                     | List ␣ ␣files ⇥ ple ase <|im_end|> ↵",
        "  prompt                     | <|im_start|> ass ist ant ↵",
        "  out seq 0            TRAIN | S ure . ↵",
        "  out seq 0            TRAIN | Done . <|im_end|>",
        "  tail seq 1                 | ↵",
        "  tail seq 1                 | <|im_start|> user ↵",
        "  tail seq 1                 | th an k s <|im_end|> ↵",
        "  tail seq 1                 | <|im_start|> ass ist ant ↵",
        "  out seq 1            TRAIN | By e . <|im_end|>",
    ]
    # The same ids without decoding: one line per span.
    ids = tito("dump", tmp_path / "logs", "--out", "-", "--no-decode").stdout.splitlines()
    assert ids[3] == "tokenizer: none (token ids)"
    spans = ids[next(i for i, line in enumerate(ids) if line.startswith("  digest ")) + 1 :]
    assert [line[:30] for line in spans] == [
        "  prompt                     |",
        "  out seq 0            TRAIN |",
        "  tail seq 1                 |",
        "  out seq 1            TRAIN |",
    ]
    assert spans[1] == "  out seq 0            TRAIN | " + " ".join(map(str, o0))


# -- the committed compact goldens say what the reference says -------------------------


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_compact_goldens_agree_with_the_reference(folder: Path) -> None:
    """Read back each compact line: unbracketed + bracketed tokens, brackets = loss 1, = expected.jsonl."""
    for entry in read_jsonl(folder / "expected.jsonl"):
        text = (GOLDEN / "conformance" / folder.name / f"{entry['session_id']}.txt").read_text()
        sample_lines = [line for line in text.splitlines() if line.startswith("sample ")]
        assert len(sample_lines) == len(entry["samples"]), entry["session_id"]
        for line, expected in zip(sample_lines, entry["samples"], strict=True):
            head, _, body = line.partition("): ")
            words = body.split(" ")
            tokens = [int(w.strip("[]")) for w in words]
            mask = [1 if w.startswith("[") else 0 for w in words]
            prompt = len(tokens) - expected["response_length"]
            assert tokens == expected["tokens"]
            assert f"(response {expected['response_length']}, reward {expected['reward']!r}" in head
            assert mask[prompt:] == expected["loss_mask"] and not any(mask[:prompt])


# -- the demo logs (fixtures/logs, from the fixtures issue) ------------------------------

DEMO_LOGS = REPO / "fixtures" / "logs"


def test_demo_log_goldens(tito_golden: TitoGolden) -> None:
    """Full-style goldens of the demo logs, decoded through fixtures/tokenizers/qwen3.

    After merging new demo logs: ``python -m pytest tests/render/test_golden.py -k demo_log --tito-update``.
    """
    report = tito_golden.check(DEMO_LOGS, GOLDEN / "logs")
    dumps = sorted((GOLDEN / "logs").glob("*.txt"))
    assert dumps and len(dumps) == len(report.checks)
    for path in dumps:
        header = path.read_text(encoding="utf-8").splitlines()[3]
        assert header.startswith("tokenizer: ") and header != "tokenizer: none (token ids)", path.name


# -- the report: invisible differences, colours ------------------------------------------


def test_diff_makes_invisible_differences_visible(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    tito("dump", cases_log, "--out", golden, "--session", "case-1.1")
    path = golden / "case-1.1.txt"
    lines = path.read_text().split("\n")
    lines[1] += "  "  # trailing blanks, as an editor might leave them
    lines[2] = lines[2].replace(" ", "\t", 1)
    path.write_text("\n".join(lines))
    result = tito("check", cases_log, "--golden", golden, "--session", "case-1.1")
    assert result.exit_code == EXIT_CHECK_FAILED
    changed = [line for line in result.stdout.splitlines() if line[:1] in ("-", "+") and line[:3] not in ("---", "+++")]
    assert changed == [
        "-session: case-1.1␣␣",
        "-policy:\\u0009slime-v4, fork threshold 1024, reward split",
        "+session: case-1.1",
        "+policy: slime-v4, fork threshold 1024, reward split",
    ]


def test_report_is_coloured_on_a_terminal_only(cases_log: Path, tmp_path: Path) -> None:
    from io import StringIO

    from rich.console import Console

    from tito_cli.golden.compare import GoldenOptions, check_goldens
    from tito_cli.golden.report import render_check_report

    golden = tmp_path / "golden"
    tito("dump", cases_log, "--out", golden, "--session", "case-1.1")
    (golden / "case-1.1.txt").write_text("edited\n")
    report = check_goldens([cases_log], golden, GoldenOptions(), ["case-1.1"])
    text = render_check_report(report, accept_command="tito check --update")

    def printed(**console: Any) -> str:
        buffer = StringIO()
        Console(file=buffer, width=80, **console).print(text, soft_wrap=True, end="")
        return buffer.getvalue()

    coloured = printed(force_terminal=True, color_system="standard")
    assert "\x1b[31m-edited" in coloured  # red removal
    assert "\x1b[" not in printed(force_terminal=False)
    # NO_COLOR drops colours (rich keeps bold, as the no-color.org convention allows).
    assert not re.search(r"\x1b\[[0-9;]*3[0-7]m", printed(force_terminal=True, color_system="standard", no_color=True))
    assert printed(force_terminal=False) == text.plain


def test_a_golden_that_is_not_utf8_is_a_change_that_update_repairs(cases_log: Path, tmp_path: Path) -> None:
    golden = tmp_path / "golden"
    tito("dump", cases_log, "--out", golden, "--session", "case-1.1")
    path = golden / "case-1.1.txt"
    path.write_bytes(path.read_bytes().replace(b"case-1.1", b"case-1.1\xff", 1))
    result = tito("check", cases_log, "--golden", golden, "-s", "case-1.1")
    assert result.exit_code == EXIT_CHECK_FAILED
    assert "-session: case-1.1\ufffd" in result.stdout.splitlines()
    assert tito("check", cases_log, "--golden", golden, "-s", "case-1.1", "--update").exit_code == EXIT_OK
    assert tito("check", cases_log, "--golden", golden, "-s", "case-1.1").exit_code == EXIT_OK


@pytest.fixture(scope="module")
def serial_dumps() -> list[tuple[str, str, str]]:
    """The demo log's dumps made by one worker: (session id, file name, text)."""
    from tito_cli.golden.compare import GoldenOptions, iter_dumps

    dumps = [(d.session_id, d.file_name, d.text) for d in iter_dumps([DEMO_LOGS], GoldenOptions(workers=1))]
    assert len(dumps) == 32
    return dumps


@pytest.mark.slow
def test_dumps_are_byte_identical_across_worker_counts(serial_dumps: list[tuple[str, str, str]]) -> None:
    from tito_cli.golden.compare import GoldenOptions, iter_dumps

    parallel = [(d.session_id, d.file_name, d.text) for d in iter_dumps([DEMO_LOGS], GoldenOptions(workers=2))]
    assert parallel == serial_dumps


@pytest.mark.slow
def test_dump_files_written_by_workers_are_the_serial_dumps(
    serial_dumps: list[tuple[str, str, str]], tmp_path: Path
) -> None:
    # Through the CLI with workers, into files: the serial dumps' bytes.
    result = tito("dump", str(DEMO_LOGS), "--out", str(tmp_path / "2"), "--workers", "2")
    assert result.exit_code == EXIT_OK, result.output
    two = {p.name: p.read_bytes() for p in (tmp_path / "2").iterdir()}
    assert two == {name: text.encode("utf-8") for _, name, text in serial_dumps}
