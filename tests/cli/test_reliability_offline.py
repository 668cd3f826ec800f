"""Reliability, round 4 (issue #39), the offline commands: each test here failed before its fix.

* ``tito import``: JSON booleans as token ids or logprobs, verifiers scores beyond float range, and
  sessions whose turns mix given and filled-in seqs are rejected at import, naming file, line and
  session (never imported into a log whose rebuild rejects them, never an internal error).
* ``tito export --to slime``: samples whose metadata is not a JSON object are exit 4 naming file,
  row and session.
* Workers die with their parent even when it dies before they have set up.
* Every Parquet file tito writes has page checksums, and every read checks them.
* Ids beyond the tokenizer's vocabulary are marked in ``inspect``, ``dump`` and ``view``.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.bad_input.kit import write_good
from tests.support.cli import tito
from tests.support.helpers import REPO
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED
from tito_cli.tokenizer import beyond_vocabulary

SOURCES = REPO / "tests" / "import_sources"
DEMO = REPO / "fixtures" / "logs"


def run(*args: str) -> tuple[int, str, str]:
    result = tito(*list(args))
    return result.exit_code, result.stdout, result.stderr


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _write_jsonl(path: Path, records: list[dict[str, Any]], raw: dict[str, str] | None = None) -> Path:
    """``records`` as JSON Lines; each ``"__KEY__"`` string is replaced by ``raw[KEY]`` (a literal JSON text)."""
    text = "".join(json.dumps(r) + "\n" for r in records)
    for key, literal in (raw or {}).items():
        text = text.replace(f'"__{key}__"', literal)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _imported_sessions(log: Path) -> set[str]:
    return {
        sid
        for f in log.glob("turns-*.parquet")
        for sid in pq.read_table(f, columns=["session_id"]).column("session_id").to_pylist()
    }


def _rebuild_rejects_nothing(log: Path, tmp_path: Path) -> None:
    """What an import wrote, a rebuild takes whole: exit 0, no rejects."""
    code, _, stderr = run("rebuild", str(log), "--out", str(tmp_path / "rebuilt.parquet"))
    assert code == EXIT_OK, stderr
    rejects = tmp_path / "rebuilt.rejects.jsonl"
    assert not rejects.exists() or rejects.read_text() == ""
    assert "rejected sessions                  0" in stderr


# -- 1. JSON booleans are no token ids and no logprobs --


def _exchanges(tmp_path: Path) -> list[dict[str, Any]]:
    """The good sessions as OpenAI exchanges (every line names its session, and has token ids and logprobs)."""
    write_good(tmp_path / "good")
    out = tmp_path / "exchanges.jsonl"
    assert run("export-exchanges", str(tmp_path / "good"), "--out", str(out))[0] == EXIT_OK
    return _jsonl(out)


def _exchanges_with(tmp_path: Path, where: str) -> tuple[Path, str, int]:
    records = _exchanges(tmp_path)
    victim = records[0]["session_id"]
    line = [k for k, r in enumerate(records) if r["session_id"] == victim][-1]
    response = records[line]["response"]
    if where == "prompt-id":
        response["prompt_token_ids"][3] = "__X__"
    elif where == "output-id":
        text = json.dumps(response).replace('"token_ids": [', '"token_ids": ["__X__", ')
        records[line]["response"] = json.loads(text)
        assert records[line]["response"] != response, "no output token_ids in the chosen record"
    else:
        response["choices"][0]["logprobs"]["content"][0]["logprob"] = "__X__"
    return _write_jsonl(tmp_path / "bad.jsonl", records, {"X": "true"}), victim, line + 1


@pytest.mark.parametrize("where", ["prompt-id", "output-id", "logprob"])
def test_openai_exchanges_with_true_as_an_id_or_logprob_reject_the_session(tmp_path: Path, where: str) -> None:
    source, victim, line = _exchanges_with(tmp_path, where)
    code, _, stderr = run("import", "openai-exchanges", str(source), "--out", str(tmp_path / "log"))
    assert code == EXIT_REJECTED, stderr
    assert f"{victim}: " in stderr and f"[{source}, row {line}]" in stderr and "boolean" in stderr
    everyone = {r["session_id"] for r in _jsonl(source)}
    assert _imported_sessions(tmp_path / "log") == everyone - {victim}


@pytest.mark.parametrize("field", ["token_ids", "logprobs"])
def test_verifiers_with_true_as_a_token_id_or_logprob_reject_the_trace(tmp_path: Path, field: str) -> None:
    episodes = _jsonl(SOURCES / "verifiers" / "rollouts" / "step_3" / "traces.jsonl")
    trace = episodes[0]["traces"][0]
    node = trace["nodes"][trace["calls"][0]["node"]]
    node[field][0] = "__X__"
    source = _write_jsonl(tmp_path / "src" / "traces.jsonl", episodes, {"X": "true"})
    code, _, stderr = run("import", "verifiers", str(source), "--out", str(tmp_path / "log"))
    assert code == EXIT_REJECTED, stderr
    assert f"{trace['id']}: " in stderr and f"[{source}, row 1]" in stderr and "boolean" in stderr
    assert trace["id"] not in _imported_sessions(tmp_path / "log")


@pytest.mark.parametrize("field", ["prompt_token_ids", "generation_token_ids", "generation_log_probs"])
def test_nemo_gym_with_true_as_a_token_id_or_logprob_rejects_the_rollout(tmp_path: Path, field: str) -> None:
    capture = tmp_path / "capture"
    shutil.copytree(SOURCES / "nemo-gym" / "capture", capture)
    tokens = capture / "rollout-chat-0.tokens.jsonl"
    calls = _jsonl(tokens)
    calls[0][field][1] = "__X__"
    _write_jsonl(tokens, calls, {"X": "false"})
    rollouts = SOURCES / "nemo-gym" / "rollouts.jsonl"
    code, _, stderr = run("import", "nemo-gym", str(capture), str(rollouts), "--out", str(tmp_path / "log"))
    assert code == EXIT_REJECTED, stderr
    assert "rollout-chat-0: " in stderr and str(tokens) in stderr and "boolean" in stderr
    assert _imported_sessions(tmp_path / "log") == {"rollout-responses-1"}


@pytest.mark.parametrize("field", ["completion_token_ids", "logprobs"])
def test_atif_with_true_as_a_token_id_or_logprob_rejects_the_trajectory(tmp_path: Path, field: str) -> None:
    source = SOURCES / "atif" / "trajectories" / "atif-chat.json"
    doc = json.loads(source.read_text(encoding="utf-8"))
    step = next(s for s in doc["steps"] if (s.get("metrics") or {}).get(field))
    step["metrics"][field][0] = "__X__"
    bad = tmp_path / "atif-chat.json"
    bad.write_text(json.dumps(doc).replace('"__X__"', "true"), encoding="utf-8")
    code, _, stderr = run("import", "atif", str(bad), "--out", str(tmp_path / "log"))
    assert code == EXIT_REJECTED, stderr
    assert f"{doc['session_id']}: " in stderr and str(bad) in stderr and "boolean" in stderr


# -- 2. a verifiers score beyond float range --


@pytest.mark.parametrize(
    ("score", "weight"),
    [("1e400", "1.0"), ("1" + "0" * 400, "1.0"), ("0.5", "1" + "0" * 400), ("1e300", "1e300")],
    ids=["1e400", "400-digit-int", "400-digit-weight", "product-overflows"],
)
def test_a_verifiers_score_beyond_float_range_rejects_its_trace(tmp_path: Path, score: str, weight: str) -> None:
    episodes = _jsonl(SOURCES / "verifiers" / "rollouts" / "step_3" / "traces.jsonl")
    trace = episodes[0]["traces"][0]
    trace["rewards"] = {"correct": {"score": "__S__", "weight": "__W__"}}
    source = _write_jsonl(tmp_path / "src" / "traces.jsonl", episodes, {"S": score, "W": weight})
    code, _, stderr = run("import", "verifiers", str(source), "--out", str(tmp_path / "log"))
    assert code == EXIT_REJECTED, stderr
    assert f"{trace['id']}: " in stderr and f"[{source}, row 1]" in stderr
    assert "beyond float range" in stderr or "beyond float64" in stderr
    everyone = {t["id"] for e in episodes for t in e["traces"]}
    assert _imported_sessions(tmp_path / "log") == everyone - {trace["id"]}


def test_a_nemo_gym_reward_beyond_float_range_names_the_rollouts_line(tmp_path: Path) -> None:
    rows = _jsonl(SOURCES / "nemo-gym" / "rollouts.jsonl")
    rows[-1]["reward"] = "__R__"
    rollouts = _write_jsonl(tmp_path / "rollouts.jsonl", rows, {"R": "1" + "0" * 400})
    capture = SOURCES / "nemo-gym" / "capture"
    code, _, stderr = run("import", "nemo-gym", str(capture), str(rollouts), "--out", str(tmp_path / "log"))
    assert code == EXIT_BAD_INPUT, stderr
    assert f"{rollouts}, row {len(rows)}" in stderr and "beyond float range" in stderr


# -- 3. what import writes, a rebuild takes: no mixed seqs --


@pytest.mark.parametrize(
    "seqs",
    [[None, 0], [None, None, 1], [5, None, 6], [2**63 - 1, None]],
    ids=["filled-then-given", "given-repeats-filled", "given-after-filled", "filled-past-int64"],
)
def test_a_session_mixing_given_and_filled_seqs_is_rejected_at_import(tmp_path: Path, seqs: list[int | None]) -> None:
    records = _exchanges(tmp_path)
    counts: dict[str, int] = {}
    for r in records:
        counts[r["session_id"]] = counts.get(r["session_id"], 0) + 1
    victim = next(sid for sid, n in counts.items() if n >= len(seqs))
    lines = [k for k, r in enumerate(records) if r["session_id"] == victim][: len(seqs)]
    for k, seq in zip(lines, seqs, strict=True):
        records[k].pop("seq", None)
        if seq is not None:
            records[k]["seq"] = seq
    source = _write_jsonl(tmp_path / "mixed.jsonl", records)
    log = tmp_path / "log"
    code, _, stderr = run("import", "openai-exchanges", str(source), "--out", str(log))
    assert code == EXIT_REJECTED, stderr
    assert f"{victim}: " in stderr and "seq" in stderr and "Traceback" not in stderr
    assert victim not in _imported_sessions(log)
    _rebuild_rejects_nothing(log, tmp_path)


def test_a_session_whose_every_turn_gives_its_seq_out_of_order_imports_and_rebuilds(tmp_path: Path) -> None:
    records = _exchanges(tmp_path)
    victim = records[0]["session_id"]
    lines = [k for k, r in enumerate(records) if r["session_id"] == victim]
    for seq, k in enumerate(lines):
        records[k]["seq"] = 10 * (len(lines) - seq)  # the reverse of the arrival order, with gaps
    records = [records[k] for k in reversed(lines)] + [r for k, r in enumerate(records) if k not in lines]
    source = _write_jsonl(tmp_path / "ordered.jsonl", records)
    code, _, stderr = run("import", "openai-exchanges", str(source), "--out", str(tmp_path / "log"))
    assert code == EXIT_OK, stderr
    _rebuild_rejects_nothing(tmp_path / "log", tmp_path)


# -- 4. export --to slime of samples whose metadata is not JSON --


@pytest.mark.parametrize(
    ("metadata", "reason"),
    [
        ("{not json", "metadata is not valid JSON"),
        ("NaN", "metadata is not valid JSON"),
        ("[1, 2]", "metadata is not a JSON object"),
        ('{"tito": 5}', "metadata['tito'] is not a JSON object"),
        ('{"tito": {"turns": 3}}', "metadata['tito']['turns'] is not a list of integers"),
    ],
    ids=["malformed", "nan", "array", "tito-not-object", "turns-not-list"],
)
@pytest.mark.parametrize("forked", ["keep", "leaf"])
def test_export_slime_of_samples_with_unusable_metadata_is_exit_4_naming_file_row_session(
    tmp_path: Path, metadata: str, reason: str, forked: str
) -> None:
    pytest.importorskip("torch")
    log = tmp_path / "logs"
    write_good(log)
    samples = tmp_path / "samples.parquet"
    assert run("rebuild", str(log), "--out", str(samples))[0] == EXIT_OK
    table = pq.read_table(samples)
    row = table.num_rows - 1
    values = table.column("metadata").to_pylist()
    values[row] = metadata
    bad = table.set_column(table.schema.get_field_index("metadata"), "metadata", pa.array(values, pa.string()))
    pq.write_table(bad.replace_schema_metadata(table.schema.metadata), samples)
    sid = table.column("session_id")[row].as_py()
    out = tmp_path / "out.pt"
    code, _, stderr = run("export", str(samples), "--to", "slime", "--forked", forked, "--out", str(out))
    assert code == EXIT_BAD_INPUT, stderr
    assert f"{samples}, row {row}" in stderr and sid in stderr and reason in stderr
    assert "Traceback" not in stderr and not out.exists()


# -- 5. workers die with their parent, even one that died before they set up --


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


LATE_WORKER = """
import os, sys, time
from tito_cli.run.lifetime import _die_with_parent
parent = os.getpid()
if os.fork() == 0:
    while os.getppid() == parent:  # the parent dies first: this worker is an orphan before it sets up
        time.sleep(0.01)
    _die_with_parent(parent)
    time.sleep(30)
    os._exit(0)
time.sleep(0.2)
os._exit(0)
"""


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
def test_a_worker_whose_parent_died_before_it_set_up_goes_at_once(tmp_path: Path) -> None:
    marker = f"tito-late-worker-{os.getpid()}-{random.randrange(10**9)}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "TITO_TEST_MARKER": marker}
    # No pipes: the orphan would hold them open, and waiting for their end would wait for it.
    done = subprocess.run(
        [sys.executable, "-c", LATE_WORKER], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, timeout=60
    )
    assert done.returncode == 0
    try:
        assert _wait_for(lambda: not _marked(marker), 10), "the orphaned worker outlived its dead parent"
    finally:
        _signal(_marked(marker), signal.SIGKILL)  # (only this test's own processes carry the marker)


def _marked(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker`` (a test's own processes, wherever re-parented)."""
    found = []
    needle = f"TITO_TEST_MARKER={marker}".encode()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0") and _alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _signal(pids: list[int], how: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, how)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads processes from /proc")
def test_no_dump_worker_outlives_a_parent_killed_right_after_spawn(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    write_good(log)
    rng = random.Random(39)
    marker = f"tito-dump-{os.getpid()}-{rng.randrange(10**9)}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "TITO_TEST_MARKER": marker}
    for attempt in range(8):  # bounded
        proc = subprocess.Popen(
            [sys.executable, "-m", "tito_cli", "dump", str(log), "--out", str(tmp_path / f"golden{attempt}"),
             "-j", "2", "--no-decode"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )  # fmt: skip
        try:
            # The workers are frozen the moment they appear (at a random point of their start, often
            # before they have set anything up), their parent is killed, and they are let go on.
            deadline = time.monotonic() + 60
            workers: list[int] = []
            while not workers and proc.poll() is None and time.monotonic() < deadline:
                workers = _children(proc.pid)
            time.sleep(rng.uniform(0, 0.002))
            _signal(workers, signal.SIGSTOP)
            proc.send_signal(signal.SIGKILL)
            proc.wait(60)
            _signal(workers, signal.SIGCONT)
        finally:
            proc.kill()
            proc.wait(60)
        assert workers, "no worker started"
        try:
            assert _wait_for(lambda: not _marked(marker), 15), f"a worker outlived its SIGKILLed parent (run {attempt})"
        finally:
            _signal(_marked(marker), signal.SIGKILL)


# -- 6. page checksums: written everywhere, checked on every read --


def _varint(data: bytes, at: int) -> int:
    while data[at] & 0x80:
        at += 1
    return at + 1


def _page_has_crc(data: bytes, at: int) -> bool:
    """Whether the Parquet page header at ``at`` carries its ``crc`` (field 4, thrift compact protocol).

    Fields 1-3 (type, uncompressed and compressed sizes) are i32s, each one byte of header (``0x15``)
    and a varint; ``crc``, when present, follows as the next i32 field.
    """
    for _ in range(3):
        assert data[at] == 0x15, f"not a page header at {at}"
        at = _varint(data, at + 1)
    return data[at] == 0x15


def _pages_without_crc(path: Path) -> list[str]:
    data = path.read_bytes()
    meta = pq.ParquetFile(path).metadata
    missing = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            column = meta.row_group(g).column(c)
            first = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
            if column.total_compressed_size and not _page_has_crc(data, first):
                missing.append(f"{path.name}: row group {g}, {column.path_in_schema}")
    return missing


def test_every_parquet_file_tito_writes_has_page_checksums(tmp_path: Path) -> None:
    log = tmp_path / "sim"
    code, _, stderr = run("simulate", "--sessions", "3", "--out", str(log))
    assert code == EXIT_OK, stderr
    samples = tmp_path / "samples.parquet"
    written = [*log.glob("*.parquet"), samples]
    assert run("rebuild", str(log), "--out", str(samples))[0] == EXIT_OK
    for fmt in ("skyrl", "trl"):
        out = tmp_path / f"{fmt}.parquet"
        assert run("rebuild", str(log), "--format", fmt, "--out", str(out))[0] == EXIT_OK
        exported = tmp_path / f"exported-{fmt}.parquet"
        assert run("export", str(samples), "--to", fmt, "--out", str(exported))[0] == EXIT_OK
        written += [out, exported]
    assert run("compact", str(log), "--out", str(tmp_path / "compact"))[0] == EXIT_OK
    written += list((tmp_path / "compact").glob("*.parquet"))
    assert len(written) >= 9
    assert [m for path in written for m in _pages_without_crc(path)] == []


def test_a_flipped_byte_in_a_log_page_never_changes_the_samples_silently(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    write_good(log)
    # The log as a capture would write it (with checksums): compacted by tito.
    assert run("compact", str(log), "--out", str(tmp_path / "log"))[0] == EXIT_OK
    log = tmp_path / "log"
    turns = next(log.glob("turns-*.parquet"))
    original = turns.read_bytes()
    meta = pq.ParquetFile(turns).metadata
    pages = []
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            column = meta.row_group(g).column(c)
            first = column.dictionary_page_offset if column.has_dictionary_page else column.data_page_offset
            pages.append((first, first + column.total_compressed_size))
    assert run("rebuild", str(log), "--out", str(tmp_path / "base.parquet"))[0] == EXIT_OK
    expected = (tmp_path / "base.parquet").read_bytes()
    rng = random.Random(39)
    offsets = sorted({rng.randrange(lo, hi) for lo, hi in pages for _ in range(3)})
    outcomes = {"same": 0, "refused": 0}
    for offset in offsets[:60]:  # bounded
        corrupt = bytearray(original)
        corrupt[offset] ^= 1 << rng.randrange(8)
        turns.write_bytes(bytes(corrupt))
        out = tmp_path / "samples.parquet"
        code, _, stderr = run("rebuild", str(log), "--out", str(out), "--overwrite")
        if code == EXIT_OK:
            assert out.read_bytes() == expected, f"a flipped byte at {offset} changed the samples with exit 0"
            outcomes["same"] += 1
        else:
            assert code == EXIT_BAD_INPUT and f"ERROR {turns}" in stderr and "Traceback" not in stderr, (offset, stderr)
            outcomes["refused"] += 1
    turns.write_bytes(original)
    assert outcomes["refused"] > 0, outcomes


def test_a_checksum_mismatch_in_a_samples_file_is_exit_4_for_export(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    write_good(log)
    samples = tmp_path / "samples.parquet"
    assert run("rebuild", str(log), "--out", str(samples))[0] == EXIT_OK
    meta = pq.ParquetFile(samples).metadata
    group = meta.row_group(0)
    tokens = next(c for c in range(meta.num_columns) if group.column(c).path_in_schema.startswith("tokens"))
    column = group.column(tokens)
    data = bytearray(samples.read_bytes())
    data[column.data_page_offset + column.total_compressed_size - 2] ^= 0x10  # the page body's last bytes
    samples.write_bytes(bytes(data))
    code, _, stderr = run("export", str(samples), "--to", "skyrl", "--out", str(tmp_path / "out.parquet"))
    assert code == EXIT_BAD_INPUT, stderr
    assert str(samples) in stderr and "Traceback" not in stderr


# -- 7. ids beyond the vocabulary, shown as such --


@pytest.fixture
def beyond_log(tmp_path: Path) -> tuple[Path, str]:
    """The demo log with one output id of its first session set to 999,999 (the vocabulary is about 151,000)."""
    log = tmp_path / "logs"
    shutil.copytree(DEMO, log)
    turns = next(log.glob("turns-*.parquet"))
    table = pq.read_table(turns)
    rows = table.to_pylist()
    sid = rows[0]["session_id"]
    rows[0]["output_ids"][0] = 999_999
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema), turns)
    return log, sid


MARKER = beyond_vocabulary(999_999)


def test_inspect_marks_an_id_beyond_the_vocabulary(beyond_log: tuple[Path, str]) -> None:
    log, sid = beyond_log
    code, stdout, stderr = run("inspect", sid, str(log), "--view", "samples")
    assert code == EXIT_OK, stderr
    assert MARKER in stdout


def test_dump_marks_an_id_beyond_the_vocabulary(beyond_log: tuple[Path, str], tmp_path: Path) -> None:
    log, _ = beyond_log
    golden = tmp_path / "golden"
    code, _, stderr = run("dump", str(log), "--out", str(golden))
    assert code == EXIT_OK, stderr
    dumps = "".join(p.read_text(encoding="utf-8") for p in golden.glob("*.txt"))
    assert MARKER.replace(" ", "_") in dumps
    assert "∅" not in dumps


def test_view_marks_an_id_beyond_the_vocabulary(beyond_log: tuple[Path, str], tmp_path: Path) -> None:
    log, _ = beyond_log
    page = tmp_path / "view.html"
    code, _, stderr = run("view", "--all", "--logs", str(log), "--out", str(page))
    assert code == EXIT_OK, stderr
    html = page.read_text(encoding="utf-8")
    assert json.dumps(MARKER, ensure_ascii=False) in html
    data = html[html.index('"vocab":') :]
    assert '"999999":' in data


def test_a_decoded_run_keeps_its_text_around_the_marker() -> None:
    from tito_cli.tokenizer import TokenText, load_decoder

    folder = REPO / "tito_cli" / "_data" / "tokenizers"
    choice = next(p for p in sorted(folder.iterdir()) if (p / "tokenizer.json").is_file())
    text = TokenText(load_decoder(choice), choice.name)
    size = len(text.tokenizer)
    ids = [10, 11, size + 5, 12]
    assert text.decode(ids) == text.decode([10, 11]) + beyond_vocabulary(size + 5) + text.decode([12])
    assert text.piece(size) == beyond_vocabulary(size) and not text.beyond(size - 1)
