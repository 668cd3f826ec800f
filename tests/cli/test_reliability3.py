"""Reliability, round 3 (issue #33): the commands added since #22 under the same rules.

Outputs: one check (``tito_cli/_targets.py``) for every command that writes:
never an input, never a special file or a symbolic link, staged and swapped,
the previous output kept on failure.  Write errors: exit 5 for every command.
Each test here failed before its fix.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.bad_input.kit import case, write_good, write_turns
from tests.support.cli import tito
from tests.support.helpers import REPO, needs
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTPUT

CASE = "cases-threshold-1024/case-2.7"
DEMO = REPO / "fixtures" / "logs"
EXCHANGES = REPO / "tests" / "import_sources" / "openai-exchanges"


def run(*args: str) -> tuple[int, str]:
    result = tito(*list(args))
    return result.exit_code, result.stderr


def tree(folder: Path) -> dict[str, bytes | str]:
    """Every entry under ``folder`` (files by content, others by kind), relative names."""
    found: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        rel = str(path.relative_to(folder))
        if path.is_symlink():
            found[rel] = f"link -> {os.readlink(path)}"
        elif path.is_fifo():
            found[rel] = "fifo"
        elif path.is_file():
            found[rel] = path.read_bytes()
        else:
            found[rel] = "folder"
    return found


@pytest.fixture()
def logs(tmp_path: Path) -> Path:
    folder = tmp_path / "logs"
    write_good(folder)
    return folder


# -- never an input, never a special file --


@pytest.mark.parametrize("target", ["turns-good.parquet", "page.parquet"])
def test_view_never_writes_over_or_into_the_log_it_reads(logs: Path, target: str) -> None:
    before = tree(logs)
    code, stderr = run("view", "--all", "--logs", str(logs), "--out", str(logs / target))
    assert code == EXIT_OUTPUT, stderr
    assert tree(logs) == before


def test_view_refuses_a_fifo_and_a_symbolic_link(logs: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "page.html"
    os.mkfifo(fifo)
    code, stderr = run("view", "--all", "--logs", str(logs), "--out", str(fifo))
    assert code == EXIT_OUTPUT and "not a regular file" in stderr, stderr
    assert fifo.is_fifo()
    link = tmp_path / "latest.html"
    (tmp_path / "real.html").write_text("old page")
    link.symlink_to(tmp_path / "real.html")
    code, stderr = run("view", "--all", "--logs", str(logs), "--out", str(link))
    assert code == EXIT_OUTPUT and "is a symbolic link" in stderr, stderr
    assert link.is_symlink() and (tmp_path / "real.html").read_text() == "old page"


@pytest.mark.parametrize("option", ["--out", "--rewards-out"])
def test_export_exchanges_never_replaces_an_input_or_a_fifo(logs: Path, tmp_path: Path, option: str) -> None:
    before = tree(logs)
    other = "--rewards-out" if option == "--out" else "--out"
    for target in (logs / "turns-good.parquet", logs / "x.parquet"):
        args = [str(logs), option, str(target), other, str(tmp_path / "other.jsonl"), "--overwrite"]
        code, stderr = run("export-exchanges", *args)
        assert code == EXIT_OUTPUT, stderr
        assert tree(logs) == before
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    code, stderr = run("export-exchanges", str(logs), option, str(fifo), other, str(tmp_path / "other.jsonl"))
    assert code == EXIT_OUTPUT and "not a regular file" in stderr, stderr
    assert fifo.is_fifo() and not (tmp_path / "other.jsonl").exists()


def test_rebuild_split_by_pattern_never_names_an_input(tmp_path: Path) -> None:
    # Files given directly whose names the {rollout_id} pattern expands to: the literal --out names none.
    log = tmp_path / "log"
    write_turns(log / "r0.parquet", case(CASE, "a"))
    write_turns(log / "r1.parquet", case(CASE, "b"))
    before = tree(log)
    given = [str(log / "r0.parquet"), str(log / "r1.parquet")]
    pattern = str(log / "r{rollout_id}.parquet")
    code, stderr = run("rebuild", *given, "--format", "slime", "--split-by", "1", "--out", pattern, "--overwrite")
    assert code == EXIT_OUTPUT and "is one of the input files" in stderr, stderr
    # The same pattern inside the folder read.
    code, stderr = run("rebuild", str(log), "--format", "slime", "--split-by", "1", "--out", pattern, "--overwrite")
    assert code == EXIT_OUTPUT, stderr
    assert tree(log) == before


def test_export_refuses_its_own_samples_file_through_a_pattern(logs: Path, tmp_path: Path) -> None:
    samples = tmp_path / "s0.parquet"
    assert run("rebuild", str(logs), "--out", str(samples))[0] == EXIT_OK
    before = samples.read_bytes()
    code, stderr = run(
        "export", str(samples), "--to", "slime", "--split-by", "1", "--out", str(tmp_path / "s{rollout_id}.parquet"),
        "--overwrite",
    )
    assert code == EXIT_OUTPUT and "is one of the input files" in stderr, stderr
    assert samples.read_bytes() == before


# -- folders: import and compact --


def test_import_overwrite_reads_the_sources_before_touching_the_log(logs: Path, tmp_path: Path) -> None:
    before = tree(logs)
    code, stderr = run("import", "openai-exchanges", str(tmp_path / "missing.jsonl"), "--out", str(logs), "--overwrite")
    assert code == EXIT_BAD_INPUT, stderr
    assert tree(logs) == before


def _exchanges(log: Path, folder: Path) -> Path:
    out = folder / "exchanges.jsonl"
    assert run("export-exchanges", str(log), "--out", str(out))[0] == EXIT_OK
    return out


def test_import_overwrite_replaces_the_whole_log_and_keeps_the_rest(logs: Path, tmp_path: Path) -> None:
    source = _exchanges(logs, tmp_path)
    (logs / "sub").mkdir()
    shutil.copy(logs / "turns-good.parquet", logs / "sub" / "turns-old.parquet")
    (logs / "README.md").write_text("notes")
    code, stderr = run("import", "openai-exchanges", str(source), "--out", str(logs), "--overwrite")
    assert code == EXIT_OK, stderr
    names = sorted(str(p.relative_to(logs)) for p in logs.rglob("*") if p.is_file())
    assert "sub/turns-old.parquet" not in names and "turns-good.parquet" not in names
    assert (logs / "README.md").read_text() == "notes"
    assert [p.name for p in logs.parent.iterdir() if p.name.startswith(".")] == []  # no staging left


def test_import_never_writes_into_a_folder_it_reads(tmp_path: Path) -> None:
    source = tmp_path / "src"
    shutil.copytree(EXCHANGES, source)
    code, stderr = run("import", "openai-exchanges", str(source), "--out", str(source / "log"))
    assert code == EXIT_OUTPUT, stderr
    assert not (source / "log").exists()


def test_compact_onto_its_own_log_is_refused_and_the_log_kept(tmp_path: Path) -> None:
    log = tmp_path / "log"
    shutil.copytree(DEMO, log)
    before = tree(log)
    code, stderr = run("compact", str(log), "--out", str(log), "--overwrite")
    assert code == EXIT_OUTPUT, stderr
    assert tree(log) == before


def test_compact_through_a_symbolic_link_is_refused_before_any_work(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "out").symlink_to(tmp_path / "real")
    code, stderr = run("compact", str(DEMO), "--out", str(tmp_path / "out"), "--overwrite")
    assert code == EXIT_OUTPUT and "is a symbolic link" in stderr, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "real"]  # no staging folder left


def test_compact_overwrite_keeps_what_is_not_the_logs_and_another_compacts_staging(tmp_path: Path) -> None:
    out = tmp_path / "compacted"
    shutil.copytree(DEMO, out)  # an older log, its README, and a tokenizer folder it names
    (out / "tokenizer").mkdir()
    (out / "tokenizer" / "tokenizer.json").write_text("{}")
    # A concurrent compact to the same --out, mid-way (it used a fixed staging name before).
    other = tmp_path / ".compacted.compact-tmp"
    other.mkdir()
    (other / "turns-compact-000001.parquet").write_text("being written")
    code, stderr = run("compact", str(DEMO), "--out", str(out), "--overwrite")
    assert code == EXIT_OK, stderr
    assert (out / "README.md").read_bytes() == (DEMO / "README.md").read_bytes()
    assert (out / "tokenizer" / "tokenizer.json").read_text() == "{}"
    assert not (out / "turns-qwen3-0-000001.parquet").exists()  # the old log's files were replaced
    assert (other / "turns-compact-000001.parquet").read_text() == "being written"
    assert run("rebuild", str(out), "--out", str(tmp_path / "s.parquet"))[0] == EXIT_OK


# -- write errors: exit 5 for every command --


def _limit_file_size() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 10, resource.RLIM_INFINITY))


def _tito_limited(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "tito_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=_limit_file_size,
        timeout=120,
    )


@pytest.fixture(scope="module")
def demo_samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("samples") / "samples.parquet"
    code, stderr = run("rebuild", str(DEMO), "--out", str(out))
    assert code == EXIT_OK, stderr
    return out


@pytest.mark.slow  # every writing command as a process
@pytest.mark.parametrize(
    "command", ["export", "export-slime", "export-exchanges", "compact", "import", "simulate"]
)
def test_a_refused_write_is_exit_5_for_every_command(command: str, tmp_path: Path, demo_samples: Path) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    if command.startswith("export-slime"):
        needs("torch", "slime")
    args = {
        "export": ["export", str(demo_samples), "--to", "skyrl", "--out", str(out_dir / "skyrl.parquet")],
        # The slime sink parks sessions in a spill file beside the output, then saves the dump.
        "export-slime": ["export", str(demo_samples), "--to", "slime", "--out", str(out_dir / "r.pt")],
        "export-exchanges": ["export-exchanges", str(DEMO), "--out", str(out_dir / "x.jsonl")],
        "compact": ["compact", str(DEMO), "--out", str(out_dir / "log")],
        "import": ["import", "openai-exchanges", "SOURCE", "--out", str(out_dir / "log")],
        "simulate": ["simulate", "--out", str(out_dir / "log"), "--sessions", "8", "--seed", "1"],
    }[command]
    if command == "import":
        args[2] = str(_exchanges(DEMO, tmp_path))
    proc = _tito_limited(*args)
    assert proc.returncode == EXIT_OUTPUT, proc.stderr
    assert "internal error" not in proc.stderr and "cannot write" in proc.stderr, proc.stderr
    assert list(out_dir.iterdir()) == []  # nothing half-written, no staging left


def test_a_refused_write_inside_torch_save_is_an_output_error(tmp_path: Path) -> None:
    # torch's archive writer turns the file's OSError into a RuntimeError: it was exit 1.
    needs("torch", "slime")
    script = (
        "from pathlib import Path\n"
        "from tito_cli.errors import OutputError\n"
        "from tito_cli.export.slime import RolloutDump\n"
        "try:\n"
        f"    RolloutDump._save({{'samples': list(range(50000))}}, Path({str(tmp_path / 'r.pt')!r}))\n"
        "except OutputError as error:\n"
        "    print('OutputError', error.message)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-c", script]
    done = subprocess.run(command, capture_output=True, text=True, env=env, preexec_fn=_limit_file_size, timeout=120)
    assert done.stdout.startswith("OutputError cannot write"), done.stdout + done.stderr


# -- terminal: a session id never starts a line of its own --

FORGED = "x\nERROR forged"


def test_compact_lists_a_hostile_session_id_on_one_line(tmp_path: Path) -> None:
    log = tmp_path / "log"
    turns = case(CASE, FORGED)
    turns[0]["output_logprobs"] = [0.0]  # fewer logprobs than output ids: the session is carried, and listed
    write_turns(log / "turns.parquet", turns)
    code, stderr = run("compact", str(log), "--out", str(tmp_path / "out"))
    assert code == 3, stderr
    assert "\nERROR forged" not in stderr and "x\\nERROR forged" in stderr


def test_import_lists_hostile_session_ids_on_one_line(tmp_path: Path) -> None:
    source = tmp_path / "x.jsonl"
    source.write_text(json.dumps({"session_id": FORGED, "request": {}, "response": {}}) + "\n")
    rewards = tmp_path / "rewards.jsonl"
    rewards.write_text(json.dumps({"session_id": "ghost\nERROR forged too", "reward": 1.0}) + "\n")
    args = ["import", "openai-exchanges", str(source), "--rewards", str(rewards), "--out", str(tmp_path / "log")]
    code, stderr = run(*args)
    assert code == 3, stderr
    assert "\nERROR forged" not in stderr and "x\\nERROR forged" in stderr and "ghost\\nERROR forged" in stderr


# -- export: the samples file's values, not only its schema --


def _tampered(samples: Path, out: Path, change: str) -> Path:
    table = pq.read_table(samples)
    rows = table.to_pylist()
    row = rows[1]
    if change == "null-token":
        row["tokens"][2] = None
    elif change == "mask-length":
        row["loss_mask"] = row["loss_mask"][:-1]
    elif change == "response-beyond-tokens":
        extra = len(row["tokens"]) + 1 - row["response_length"]
        row["response_length"] += extra
        row["loss_mask"] += [0] * extra
        row["rollout_log_probs"] += [0.0] * extra
    elif change == "negative-id":
        row["tokens"][0] = -5
    elif change == "mask-seven":
        row["loss_mask"][0] = 7
    elif change == "nan-logprob":
        row["rollout_log_probs"][0] = float("nan")
    elif change == "infinite-reward":
        row["reward"] = float("inf")
    schema = pa.schema([f.with_nullable(True) for f in table.schema], metadata=table.schema.metadata)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), out)
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("null-token", "tokens holds a null (position 2)"),
        ("mask-length", "loss_mask has"),
        ("response-beyond-tokens", "is outside 0.."),
        ("negative-id", "negative token id"),
        ("mask-seven", "other than 0 and 1"),
        ("nan-logprob", "NaN or infinity"),
        ("infinite-reward", "reward is inf"),
    ],
)
def test_export_refuses_sample_values_a_trainer_would_get_wrong(
    demo_samples: Path, tmp_path: Path, change: str, message: str
) -> None:
    bad = _tampered(demo_samples, tmp_path / "bad.parquet", change)
    session = pq.read_table(demo_samples).column("session_id")[1].as_py()
    code, stderr = run("export", str(bad), "--to", "skyrl", "--out", str(tmp_path / "skyrl.parquet"))
    assert code == EXIT_BAD_INPUT, stderr
    assert f"{bad}, row 1, session {session!r}" in stderr and message in stderr, stderr
    assert not (tmp_path / "skyrl.parquet").exists()


# -- rLLM: stores a gateway did not write quite as expected --

RLLM = REPO / "tests" / "import_sources" / "rllm" / "traces.db"


def _store(path: Path, *statements: str) -> Path:
    """The shipped store copied without its constraints and column types, then changed by ``statements``."""
    connection = sqlite3.connect(path)
    connection.execute(f"ATTACH DATABASE '{RLLM}' AS src")
    connection.execute("CREATE TABLE traces (trace_id, data, created_at)")
    connection.execute("INSERT INTO traces SELECT trace_id, data, created_at FROM src.traces")
    connection.execute("CREATE TABLE trace_sessions (trace_id, session_id, created_at)")
    connection.execute("INSERT INTO trace_sessions SELECT trace_id, session_id, created_at FROM src.trace_sessions")
    for statement in statements:
        connection.execute(statement)
    connection.commit()
    connection.close()
    return path


def _imported(tmp_path: Path, store: Path) -> tuple[int, str, dict[str, int]]:
    out = tmp_path / "log"
    code, stderr = run("import", "rllm", str(store), "--out", str(out))
    turns: dict[str, int] = {}
    if out.exists():
        for file in out.glob("turns-*.parquet"):
            for sid in pq.read_table(file, columns=["session_id"]).column("session_id").to_pylist():
                turns[sid] = turns.get(sid, 0) + 1
    return code, stderr, turns


def test_rllm_a_trace_id_held_twice_rejects_its_session(tmp_path: Path) -> None:
    first = "trace_id = '0f9effe3-e0dd-4707-97a5-d721db420483'"  # a trace of tool-session
    store = _store(
        tmp_path / "dup.db",
        f"INSERT INTO traces SELECT * FROM traces WHERE {first}",
        f"INSERT INTO trace_sessions SELECT * FROM trace_sessions WHERE {first}",
    )
    code, stderr, turns = _imported(tmp_path, store)
    assert code == 3, stderr
    assert "appears 2 times in the traces table" in stderr
    assert "tool-session" not in turns and turns  # the other sessions are imported, once each
    clean_code, _, clean = _imported(tmp_path / "clean", _store(tmp_path / "clean.db"))
    assert clean_code == EXIT_OK and {sid: n for sid, n in clean.items() if sid != "tool-session"} == turns


@pytest.mark.parametrize(
    "change",
    [
        "UPDATE trace_sessions SET created_at = 'yesterday' WHERE rowid = 2",
        "UPDATE trace_sessions SET session_id = NULL WHERE session_id = 'tool-session'",
        "UPDATE trace_sessions SET session_id = 42 WHERE session_id = 'tool-session'",
    ],
)
def test_rllm_odd_column_types_are_not_an_internal_error(tmp_path: Path, change: str) -> None:
    # Without the records' own timestamps the store's created_at orders the calls.
    untimed = "UPDATE traces SET data = json_remove(data, '$.timestamp')"
    code, stderr, turns = _imported(tmp_path, _store(tmp_path / "odd.db", untimed, change))
    assert code in (EXIT_OK, 3), stderr
    assert turns and "internal error" not in stderr
    if "session_id" in change:
        assert "not text" in stderr and "tool-session" not in turns


def test_rllm_a_store_path_with_a_hash_opens_that_file(tmp_path: Path) -> None:
    store = tmp_path / "traces#1.db"
    shutil.copy(RLLM, store)
    code, stderr, turns = _imported(tmp_path, store)
    assert code == EXIT_OK and turns, stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log", "traces#1.db"]  # no stray "traces"


# -- NeMo Gym: the rollouts rows' own keys --

NEMO = REPO / "tests" / "import_sources" / "nemo-gym"


@pytest.mark.parametrize(
    ("row", "rollout"),
    [
        ({"_ng_rollout_id": "custom.id_1"}, "custom.id_1"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1}, "3-1"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 0}, "3-1"),
        ({"_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 2}, "3-1-a2"),
        ({"_ng_rollout_id": "c", "_ng_task_index": 3, "_ng_rollout_index": 1, "_ng_attempt_index": 1}, "c-a1"),
    ],
)
def test_nemo_gym_rewards_join_by_nemo_gyms_own_rollout_id(
    tmp_path: Path, row: dict[str, object], rollout: str
) -> None:
    capture = tmp_path / "capture"
    capture.mkdir()
    for path in (NEMO / "capture").iterdir():
        if path.name.startswith("rollout-chat-0."):
            shutil.copy(path, capture / path.name.replace("rollout-chat-0", rollout))
    rollouts = tmp_path / "rollouts.jsonl"
    rollouts.write_text(json.dumps({**row, "reward": 0.75, "responses_create_params": {"input": []}}) + "\n")
    out = tmp_path / "log"
    code, stderr = run("import", "nemo-gym", str(capture), str(rollouts), "--out", str(out))
    assert code == EXIT_OK, stderr
    sessions = pq.read_table(next(out.glob("sessions-*.parquet"))).to_pylist()
    assert [(s["session_id"], s["reward"]) for s in sessions] == [(rollout, 0.75)]


# -- JSONL sources: a session is imported whole or not at all --


def test_a_byte_order_mark_does_not_cost_the_first_record(logs: Path, tmp_path: Path) -> None:
    source = _exchanges(logs, tmp_path)
    plain = run("import", "openai-exchanges", str(source), "--out", str(tmp_path / "plain"))
    marked = tmp_path / "marked.jsonl"
    marked.write_bytes(b"\xef\xbb\xbf" + source.read_bytes())
    code, stderr = run("import", "openai-exchanges", str(marked), "--out", str(tmp_path / "marked"))
    assert code == plain[0] == EXIT_OK, stderr
    turns = [pq.read_table(next((tmp_path / name).glob("turns-*.parquet"))).num_rows for name in ("plain", "marked")]
    assert turns[0] == turns[1] > 0


@pytest.mark.parametrize("line", ['{"session_id": "good", "request": ', '{"request": {}, "response": {}}'])
def test_a_line_no_session_can_be_told_from_stops_the_import(logs: Path, tmp_path: Path, line: str) -> None:
    source = _exchanges(logs, tmp_path)
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join([*lines[:2], line + "\n", *lines[2:]]), encoding="utf-8")
    code, stderr = run("import", "openai-exchanges", str(broken), "--out", str(tmp_path / "log"))
    assert code == EXIT_BAD_INPUT, stderr
    assert f"{broken}, row 3" in stderr
    assert not (tmp_path / "log").exists()


LITERALS = {
    "5000-digits": ("metadata", "1" * 5000),
    "nested-100000": ("metadata", "[" * 100_000 + "]" * 100_000),
    "nan": ("metadata", "NaN"),
    "lone-surrogate": ("metadata", '"\\ud800"'),
    "seq-2**63": ("seq", str(2**63)),
    "seq-float": ("seq", "1.5"),
    "seq-string": ("seq", '"1"'),
    "logprob-400-digits": ("logprob", "1" + "0" * 400),
}


@pytest.mark.parametrize("case_name", sorted(LITERALS))
def test_a_value_python_or_the_writer_refuses_rejects_its_session_only(
    logs: Path, tmp_path: Path, case_name: str
) -> None:
    # The value goes into a later turn of one session: that session is rejected (exit 3), the rest imported.
    where, literal = LITERALS[case_name]
    source = _exchanges(logs, tmp_path)
    records = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines()]
    victim = records[0]["session_id"]
    later = [k for k, r in enumerate(records) if r["session_id"] == victim][1]
    if where == "metadata":
        records[later]["metadata"] = {"v": "__X__"}
    elif where == "seq":
        records[later]["seq"] = "__X__"
    else:
        records[later]["response"]["choices"][0]["logprobs"]["content"][0]["logprob"] = "__X__"
    lines = [json.dumps(r).replace('"__X__"', literal) for r in records]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    code, stderr = run("import", "openai-exchanges", str(bad), "--out", str(tmp_path / "log"))
    assert code == 3, stderr
    assert f"{victim}: " in stderr and f"[{bad}, row {later + 1}]" in stderr
    imported = {
        sid
        for f in (tmp_path / "log").glob("turns-*.parquet")
        for sid in pq.read_table(f, columns=["session_id"]).column("session_id").to_pylist()
    }
    assert imported == {r["session_id"] for r in records} - {victim}



# -- ATIF, verifiers, rewards files: nothing reordered, nothing emptied, no exit 1 --

SOURCES = REPO / "tests" / "import_sources"


def _turn_rows(log: Path) -> list[dict[str, object]]:
    rows = [r for f in sorted(log.glob("turns-*.parquet")) for r in pq.read_table(f).to_pylist()]
    return sorted(
        ({k: r[k] for k in ("session_id", "seq", "prompt_ids", "output_ids")} for r in rows),
        key=lambda r: (str(r["session_id"]), int(r["seq"])),  # type: ignore[call-overload]
    )


def test_atif_a_repeated_step_id_rejects_its_trajectory(tmp_path: Path) -> None:
    source = next(p for p in sorted((SOURCES / "atif" / "trajectories").glob("*.json")))
    doc = json.loads(source.read_text(encoding="utf-8"))
    doc["steps"][-1]["step_id"] = doc["steps"][0]["step_id"]
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps(doc), encoding="utf-8")
    code, stderr = run("import", "atif", str(bad), "--out", str(tmp_path / "log"))
    assert code == 3, stderr
    assert f"step_id {doc['steps'][0]['step_id']} is also step 0's" in stderr


def test_verifiers_a_mask_of_ones_and_zeros_imports_as_the_booleans_do(tmp_path: Path) -> None:
    rollouts = SOURCES / "verifiers" / "rollouts"
    assert run("import", "verifiers", str(rollouts), "--out", str(tmp_path / "bools"))[0] == EXIT_OK
    ints = tmp_path / "ints" / "step_3"
    ints.mkdir(parents=True)
    lines = (rollouts / "step_3" / "traces.jsonl").read_text(encoding="utf-8").splitlines()
    episodes = [json.loads(line) for line in lines]
    for episode in episodes:
        for trace in episode["traces"]:
            for node in trace.get("nodes", []):
                if isinstance(node.get("mask"), list):
                    node["mask"] = [int(m) for m in node["mask"]]
    (ints / "traces.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes), encoding="utf-8")
    code, stderr = run("import", "verifiers", str(tmp_path / "ints"), "--out", str(tmp_path / "from-ints"))
    assert code == EXIT_OK, stderr
    assert _turn_rows(tmp_path / "from-ints") == _turn_rows(tmp_path / "bools")
    assert any(r["output_ids"] for r in _turn_rows(tmp_path / "bools"))


def test_a_rewards_file_with_a_400_digit_reward_is_exit_4(tmp_path: Path) -> None:
    rewards = tmp_path / "rewards.jsonl"
    rewards.write_text('{"session_id": "a", "reward": 1' + "0" * 400 + "}\n")
    trajectories = SOURCES / "atif" / "trajectories"
    code, stderr = run("import", "atif", str(trajectories), "--rewards", str(rewards), "--out", str(tmp_path / "log"))
    assert code == EXIT_BAD_INPUT and f"{rewards}, row 1" in stderr, stderr


# -- a glob of turns files that leaves the sessions files out --


@pytest.mark.parametrize("command", ["rebuild", "compact", "export-exchanges"])
def test_turns_files_given_without_their_sessions_file_are_refused(tmp_path: Path, command: str) -> None:
    # `tito rebuild logs/turns-*.parquet`: every session would train at reward 0.0.
    turns = sorted(str(p) for p in DEMO.glob("turns-*.parquet"))
    out = tmp_path / "out"
    code, stderr = run(command, *turns, "--out", str(out if command == "compact" else tmp_path / "x.parquet"))
    assert code == EXIT_BAD_INPUT, stderr
    assert "without it every session would be rebuilt at reward 0.0" in stderr
    given = [*turns, *sorted(str(p) for p in DEMO.glob("sessions-*.parquet"))]
    code, stderr = run(command, *given, "--out", str(out if command == "compact" else tmp_path / "x.parquet"))
    assert code == EXIT_OK, stderr


# -- rebuild --drift-classes: --tokenizer honoured, a missing tokenizer said --


def test_drift_classes_honour_tokenizer_and_say_when_it_is_not_found(tmp_path: Path) -> None:
    log = tmp_path / "elsewhere"
    log.mkdir()
    for path in DEMO.glob("*.parquet"):
        table = pq.read_table(path)
        few = [sid for sid in table.column("session_id").to_pylist() if sid < "qwen3-0-0004"]
        table = table.take([k for k, sid in enumerate(table.column("session_id").to_pylist()) if sid in few])
        meta = {**(table.schema.metadata or {}), b"tito.tokenizer": b"no/such/tokenizer"}
        pq.write_table(table.replace_schema_metadata(meta), log / path.name)
    args = ["rebuild", str(log), "--out", str(tmp_path / "s.parquet"), "--drift-classes", "--overwrite"]
    code, stderr = run(*args)
    assert code == EXIT_OK, stderr
    assert "drift classes not counted: the log's tokenizer no/such/tokenizer is not found here" in stderr
    shipped = REPO / "tito_cli" / "_data" / "tokenizers" / "qwen3"
    code, stderr = run(*args, "--tokenizer", f"no/such/tokenizer={shipped}")
    assert code == EXIT_OK, stderr
    assert "forks and realigns by drift class" in stderr and "not counted" not in stderr
    code, stderr = run(*args, "--tokenizer", f"no/such/tokenizer={tmp_path / 'missing'}")
    assert code == 2, stderr


# -- hand-off to trainers: what the export summary says --


def test_export_summary_gives_sample_lengths_and_warns_of_trls_default_max_length(
    demo_samples: Path, tmp_path: Path
) -> None:
    code, stderr = run("export", str(demo_samples), "--to", "trl", "--out", str(tmp_path / "trl.parquet"))
    assert code == EXIT_OK, stderr
    lengths = sorted(len(t) for t in pq.read_table(demo_samples, columns=["tokens"]).column("tokens").to_pylist())
    assert f"sample lengths (tokens): min {lengths[0]:,}, median {lengths[len(lengths) // 2]:,}" in stderr
    assert f"max {lengths[-1]:,}" in stderr
    longer = sum(n > 1024 for n in lengths)
    assert f"{longer} of {len(lengths)} samples are longer than TRL's default max_length=1024" in stderr
    assert f"SFTConfig(max_length={lengths[-1]})" in stderr


def test_slime_export_checks_rollout_ids(demo_samples: Path, tmp_path: Path) -> None:
    needs("torch", "slime")
    table = pq.read_table(demo_samples)
    ids = table.column("rollout_id").to_pylist()
    same = pa.array([None if r is None else 7 for r in ids], pa.int64())  # every session the same id
    shared = tmp_path / "shared.parquet"
    pq.write_table(table.set_column(table.schema.get_field_index("rollout_id"), "rollout_id", same), shared)
    code, stderr = run("export", str(shared), "--to", "slime", "--out", str(tmp_path / "r.pt"))
    assert code == EXIT_OK, stderr
    rows = table.select(["session_id", "rollout_id"]).to_pylist()
    with_id = sorted({r["session_id"] for r in rows if r["rollout_id"] is not None})
    without = sorted({r["session_id"] for r in rows if r["rollout_id"] is None})
    assert f"rollout ids: {len(without)} session without one (e.g. {without[0]!r}" in stderr
    assert f"{len(with_id) - 1} sessions whose id an earlier session holds (e.g. 7, again in {with_id[1]!r}" in stderr
    code, stderr = run("export", str(demo_samples), "--to", "slime", "--out", str(tmp_path / "r.pt"), "--overwrite")
    assert "sessions whose id an earlier session holds" not in stderr
