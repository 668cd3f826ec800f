"""Parallel rebuild: the same bytes for any number of workers and any batching, conformance included."""

from __future__ import annotations

import functools
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import conformance_folders, read_jsonl, write_log
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.errors import EXIT_BAD_INPUT, UnreadableLogError
from tito_cli.read.index import LogIndex, RowGroup, SessionPlace
from tito_cli.read.index_pass import build_index
from tito_cli.read.turnlog import TurnLog
from tito_cli.run import plan as planning
from tito_cli.run import pool as parallel
from tito_cli.run.corpus import Corpus
from tito_cli.run.in_order import InOrder
from tito_cli.run.local import SessionOutput, rebuild_outputs
from tito_cli.run.plan import (
    MIN_PARALLEL_BYTES,
    decoded_bytes,
    plan,
    plan_batches,
    work_bytes,
    worker_cap,
    workers_for,
)
from tito_cli.run.rebuild import rebuild

FOLDERS = conformance_folders()


def _conformance_log(tmp_path: Path, name: str) -> tuple[Path, SlimeV4]:
    folder = next(f for f in FOLDERS if f.name == name)
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    return logs, SlimeV4(fork_threshold=int((folder / "threshold").read_text()))


@pytest.mark.parametrize("name", ["cases-threshold-1024", "random-threshold-2"])
def test_two_workers_write_the_same_bytes_as_one(tmp_path: Path, name: str) -> None:
    logs, policy = _conformance_log(tmp_path, name)
    one = rebuild([logs], tmp_path / "one.parquet", policy, workers=1)
    # One session per batch: every batch goes to a worker process, results arrive batch by batch.
    two = rebuild([logs], tmp_path / "two.parquet", policy, workers=2, batch_bytes=1)

    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    assert (tmp_path / "one.parquet.rejects.jsonl").read_text() == (tmp_path / "two.parquet.rejects.jsonl").read_text()
    assert two.totals == one.totals
    assert two.sessions == one.sessions > 0


def test_worker_handoff_files_never_outlive_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs, policy = _conformance_log(tmp_path, "random-threshold-2")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    rebuild([logs], tmp_path / "two.parquet", policy, workers=2, batch_bytes=1)
    assert list(scratch.iterdir()) == []
    # Nor when the run stops half-way (the consumer gives up after the first output).
    corpus = Corpus.open([logs])
    outputs = rebuild_outputs(corpus, policy, plan(corpus.log.index(), 2, 2, 1), spill_dir=tmp_path)
    first = next(outputs)
    assert first.session_id == corpus.session_ids()[0]
    outputs.close()
    assert list(scratch.iterdir()) == []


def test_outputs_come_in_session_id_order_whatever_the_log_order(tmp_path: Path) -> None:
    # Sessions finish in the log in the reverse of their id order, so every one but the last arrives early.
    turns = []
    for n in range(6):
        sid = f"s{5 - n}"
        for seq in range(2):
            turns.append(
                {
                    "session_id": sid,
                    "seq": seq,
                    "prompt_ids": [1, 2, 3] + [7] * seq,
                    "output_ids": [4, 5],
                    "prompt_messages": [{"role": "user", "content": f"{sid} {seq}"}],
                }
            )
    logs = tmp_path / "logs"
    write_log(logs, turns, max_rows=2)
    corpus = Corpus.open([logs])
    index = corpus.log.index()
    assert [p.session_id for p in index.in_log_order()] == [f"s{5 - n}" for n in range(6)]

    outputs = list(rebuild_outputs(corpus, SlimeV4(), plan(corpus.log.index(), 1, 1, 1), spill_dir=tmp_path))
    assert [o.session_id for o in outputs] == [f"s{n}" for n in range(6)]
    assert all(isinstance(o, SessionOutput) and o.table is not None for o in outputs)
    assert [o.table.column("session_id")[0].as_py() for o in outputs] == [f"s{n}" for n in range(6)]


def test_early_outputs_are_parked_on_disk_and_come_back_intact(tmp_path: Path) -> None:
    logs, policy = _conformance_log(tmp_path, "random-threshold-8")
    corpus = Corpus.open([logs])
    outputs = [o for o in rebuild_outputs(corpus, policy) if isinstance(o, SessionOutput) and o.table.num_rows]
    tables = {o.session_id: o.table for o in outputs}
    in_order = InOrder(sorted(tables), spill_dir=tmp_path)
    arrivals = [SessionOutput(o.session_id, o.table, o.report) for o in reversed(outputs)]
    emitted = []
    for output in arrivals[:-1]:
        emitted += list(in_order.push(output))
    # Nothing can go out before the first id arrives, and what waits holds no rows in memory.
    assert emitted == []
    assert all(o.table is None for o in arrivals[:-1])
    emitted += list(in_order.push(arrivals[-1])) + list(in_order.finish())
    in_order.close()
    assert [o.session_id for o in emitted] == sorted(tables)
    for output in emitted:
        assert output.table.equals(tables[output.session_id])


def test_batches_cover_every_session_once_in_log_order(tmp_path: Path) -> None:
    logs, _ = _conformance_log(tmp_path, "random-threshold-3")
    index = Corpus.open([logs]).log.index()
    for batch_bytes in (1, index.nbytes / 3, None):
        batches = plan_batches(index, workers=2, batch_bytes=batch_bytes)
        flat = [p.session_id for b in batches for p in b.sessions]
        assert flat == [p.session_id for p in index.in_log_order()]
        assert sorted(flat) == index.session_ids
    assert len(plan_batches(index, workers=2, batch_bytes=1)) == len(index.session_ids)
    # A log this small is not worth starting processes for.
    assert len(plan_batches(index, workers=2)) == 1


def _index_of_sizes(sizes_mib: list[int]) -> LogIndex:
    """A log index of sessions in one row group each (every cut is clean), of the given decoded sizes."""
    groups = [RowGroup(0, g, g, 1, 0.0) for g in range(len(sizes_mib))]
    places = {
        f"s{g:03d}": SessionPlace(f"s{g:03d}", np.array([g]), np.array([0]), size << 20)
        for g, size in enumerate(sizes_mib)
    }
    return LogIndex(groups, places)


def test_batches_are_bounded_and_shrink_toward_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    index = _index_of_sizes([10] * 200)  # 2000 MiB
    monkeypatch.setattr(planning, "MAX_BATCH_BYTES", 64 << 20)
    sizes = [b.nbytes >> 20 for b in plan_batches(index, workers=2)]
    assert sum(sizes) == 2000
    # Bounded whatever the log's size (a worker holds a whole batch's samples): a batch
    # closes at the first session that takes it to the bound.
    assert max(sizes) < 64 + 10
    # The last batches are the shortest: the two workers finish close together.
    assert sizes == sorted(sizes, reverse=True)
    assert sizes[-1] == 10 and sizes[0] > 4 * sizes[-1]


def test_a_worker_error_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs, policy = _conformance_log(tmp_path, "random-threshold-1")
    corpus = Corpus.open([logs])
    corpus.log.index()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    # The file goes bad after the first pass: the worker that reads it raises, and the error crosses over.
    victim = corpus.log.turn_files[-1].path
    victim.write_bytes(b"PAR1 not really")
    with pytest.raises(UnreadableLogError) as caught:
        list(rebuild_outputs(corpus, policy, plan(corpus.log.index(), 2, 2, 1)))
    assert caught.value.file == str(victim)
    # Batches that finished before the error left no handoff file behind.
    assert list(scratch.iterdir()) == []


def test_cli_workers_option(tmp_path: Path) -> None:
    logs, _ = _conformance_log(tmp_path, "random-threshold-1024")
    one = tito("rebuild", str(logs), "--out", str(tmp_path / "a.parquet"), "--workers", "1")
    two = tito("rebuild", str(logs), "--out", str(tmp_path / "b.parquet"), "-j", "2", "--batch-mb", "0.001")
    assert one.exit_code == two.exit_code == 0, one.output + two.output
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
    assert pq.read_metadata(tmp_path / "a.parquet").num_rows > 0

    bad = tito("rebuild", str(logs), "--out", str(tmp_path / "c.parquet"), "--workers", "0")
    assert bad.exit_code == 2
    assert "--workers" in bad.output


def test_cli_unreadable_file_with_workers(tmp_path: Path) -> None:
    logs, _ = _conformance_log(tmp_path, "random-threshold-1024")
    (logs / "turns-broken.parquet").write_bytes(b"not parquet")
    result = tito("rebuild", str(logs), "--out", str(tmp_path / "x.parquet"), "-j", "2", "--batch-mb", "0.001")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "turns-broken.parquet" in result.output
    assert not (tmp_path / "x.parquet").exists()


def test_batches_are_cut_between_sessions_that_share_no_row_group(tmp_path: Path) -> None:
    # Sessions recorded two at a time: each file (one row group) holds a pair's turns.
    turns = read_jsonl(conformance_folders()[0].parent / "cases-threshold-1024" / "turns.jsonl")
    by_session: dict[str, list[dict[str, object]]] = {}
    for t in turns:
        by_session.setdefault(str(t["session_id"]), []).append(t)
    pairs = [sorted(by_session)[i : i + 2] for i in range(0, 8, 2)]
    logs = tmp_path / "logs"
    for n, pair in enumerate(pairs):
        write_log(logs, [t for sid in pair for t in by_session[sid]], name=f"pair{n}")
    index = Corpus.open([logs]).log.index()
    one_session = min(index.places[sid].nbytes for pair in pairs for sid in pair)
    batches = plan_batches(index, workers=2, batch_bytes=one_session)
    groups = [{int(g) for p in b.sessions for g in p.groups} for b in batches]
    # Closing a batch after one session of a pair would make both batches decode the pair's row group.
    assert len(batches) == 4
    assert all(not (a & b) for i, a in enumerate(groups) for b in groups[i + 1 :])


def _many_files_log(tmp_path: Path) -> tuple[Path, SlimeV4]:
    """A conformance log in files of 7 rows: enough files for the workers to index it."""
    folder = next(f for f in FOLDERS if f.name == "random-threshold-2")
    logs = tmp_path / "many"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=7)
    assert len(list(logs.glob("turns-*.parquet"))) >= parallel.OPEN_FILES_PER_WORKER * 2
    return logs, SlimeV4(fork_threshold=2)


def _same_index(a: LogIndex, b: LogIndex) -> None:
    assert a.row_groups == b.row_groups
    assert list(a.places) == list(b.places)  # the same sessions, in the same order
    for sid, place in a.places.items():
        other = b.places[sid]
        assert place.nbytes == other.nbytes
        assert place.groups.dtype == other.groups.dtype
        assert np.array_equal(place.groups, other.groups) and np.array_equal(place.rows, other.rows)


def test_an_index_built_by_worker_processes_is_the_in_process_one(tmp_path: Path) -> None:
    logs, _ = _many_files_log(tmp_path)
    files = Corpus.open([logs]).log.turn_files
    with ProcessPoolExecutor(2, mp_context=parallel.worker_context()) as pool:
        for only in (None, {"r7-0008", "r7-0041", "missing"}):
            serial = build_index(files, only)
            pooled = build_index(files, only, map_files=functools.partial(pool.map, chunksize=3))
            _same_index(serial, pooled)
    assert len(serial.places) == 2  # the `only` pass kept only the sessions asked for


def test_a_log_of_many_files_is_opened_by_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs, policy = _many_files_log(tmp_path)
    mapped: list[bool] = []
    real = TurnLog.open

    def spy(paths: Any, **options: Any) -> TurnLog:
        mapped.append(options.get("map_files") is not None)
        return real(paths, **options)

    monkeypatch.setattr(TurnLog, "open", spy)
    rebuild([logs], tmp_path / "one.parquet", policy, workers=1)
    assert mapped == [False]
    mapped.clear()
    # Small log: the batches run in-process, but the files were opened and indexed by the workers.
    rebuild([logs], tmp_path / "two.parquet", policy, workers=2)
    assert mapped == [True]
    # The same pool runs the batches too.
    rebuild([logs], tmp_path / "three.parquet", policy, workers=2, batch_bytes=1)
    one = (tmp_path / "one.parquet").read_bytes()
    assert one == (tmp_path / "two.parquet").read_bytes() == (tmp_path / "three.parquet").read_bytes()


def test_opening_and_indexing_in_one_pass_gives_the_two_pass_result(tmp_path: Path) -> None:
    logs, _ = _many_files_log(tmp_path)
    separate = TurnLog.open([logs])
    assert separate._index is None  # classified only: the index waits for its first use
    with ProcessPoolExecutor(2, mp_context=parallel.worker_context()) as pool:
        for map_files in (None, functools.partial(pool.map, chunksize=3)):
            combined = TurnLog.open([logs], index=True, map_files=map_files)
            assert combined.files == separate.files and combined.session_files
            _same_index(combined.index(), build_index(separate.turn_files))


def test_a_bad_file_met_by_the_workers_index_pass_is_named(tmp_path: Path) -> None:
    logs, _ = _many_files_log(tmp_path)
    table = pa.table(
        {"session_id": ["a", None], "seq": [0, 1], "prompt_ids": [[1], [2]], "output_ids": [[3], [4]],
         "finish_reason": ["stop"] * 2, "prompt_messages": ["[]"] * 2},
    )
    pq.write_table(table, logs / "turns-zz-bad.parquet")
    result = tito("rebuild", str(logs), "--out", str(tmp_path / "x.parquet"), "-j", "2")
    assert result.exit_code == EXIT_BAD_INPUT
    assert "turns-zz-bad.parquet" in result.output and "row 1" in result.output
    assert not (tmp_path / "x.parquet").exists()


def _tiny_sessions_log(tmp_path: Path, sessions: int) -> Path:
    """Many small sessions over many small files: with one session per batch, a handoff file per session."""
    rng = np.random.default_rng(7)
    turns = []
    for s in range(sessions):
        sid = f"tiny-{s:04d}"
        for seq in range(int(rng.integers(1, 4))):
            prompt = [1, 2, 3, *([9] * seq * 4)]
            out = [int(t) for t in rng.integers(10, 99, size=int(rng.integers(0, 5)))]
            turns.append(
                {
                    "session_id": sid,
                    "seq": seq,
                    "prompt_ids": prompt,
                    "output_ids": out,
                    "output_logprobs": [-0.25] * len(out),
                    "prompt_messages": [{"role": "user", "content": f"task {s}"}] + [
                        {"role": "assistant", "content": f"reply {k}"} for k in range(seq)
                    ],
                    "response_message": {"role": "assistant", "content": f"reply {seq}"},
                }
            )
    rows = sorted(turns, key=lambda t: (int(t["session_id"][-4:]) % 7, t["session_id"], t["seq"]))
    logs = tmp_path / "tiny"
    write_log(logs, rows, [{"session_id": f"tiny-{s:04d}", "reward": 1.0} for s in range(0, sessions, 2)], max_rows=40)
    return logs


@pytest.fixture(scope="module")
def tiny_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bytes]:
    """240 tiny sessions over many small files, and the samples one worker writes of them."""
    folder = tmp_path_factory.mktemp("tiny")
    logs = _tiny_sessions_log(folder, 240)
    one = folder / "one.parquet"
    rebuild([logs], one, workers=1)
    return logs, one.read_bytes()


@pytest.fixture
def own_tmpdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``$TMPDIR`` of the test's own, where the handoff folders go (and must not stay)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    return scratch


@pytest.mark.slow  # worker pools started again and again
@pytest.mark.parametrize("attempt", range(4))
@pytest.mark.parametrize("workers", [2, 4])
def test_worker_handoff_under_stress_many_tiny_batches_repeated(
    tiny_log: tuple[Path, bytes], own_tmpdir: Path, tmp_path: Path, workers: int, attempt: int
) -> None:
    """``batch_bytes=0``: one session per batch, a handoff file each, run after run: same bytes, no file left."""
    logs, expected = tiny_log
    out = tmp_path / "run.parquet"
    summary = rebuild([logs], out, workers=workers, batch_bytes=0)
    assert summary.sessions == 240
    assert out.read_bytes() == expected
    assert list(own_tmpdir.iterdir()) == []


@pytest.mark.parametrize("workers", [2, 4])
def test_worker_handoff_of_many_tiny_batches_from_the_command_line(
    tiny_log: tuple[Path, bytes], own_tmpdir: Path, tmp_path: Path, workers: int
) -> None:
    """``--batch-mb 0 -j N``, as the issue ran it."""
    logs, expected = tiny_log
    out = tmp_path / "cli.parquet"
    result = tito("rebuild", str(logs), "--out", str(out), "--batch-mb", "0", "-j", str(workers))
    assert result.exit_code == 0, result.output
    assert out.read_bytes() == expected
    assert list(own_tmpdir.iterdir()) == []


def _index(groups_of_session: list[list[int]], rows_per_group: int, group_bytes: float) -> LogIndex:
    """A log index by hand: session i has one row in each row group of ``groups_of_session[i]``."""
    count = 1 + max(g for groups in groups_of_session for g in groups)
    per_row = group_bytes / rows_per_group
    row_groups = [RowGroup(0, g, g * rows_per_group, rows_per_group, per_row) for g in range(count)]
    places = {}
    used = [0] * count  # rows of each row group given out so far
    for number, groups in enumerate(groups_of_session):
        sid = f"s{number:03d}"
        size = int(len(groups) * group_bytes / rows_per_group)
        rows = []
        for g in groups:
            rows.append(used[g])
            used[g] += 1
        assert max(used) <= rows_per_group
        places[sid] = SessionPlace(sid, np.array(groups), np.array(rows), size)
    return LogIndex(row_groups, places)


def test_the_default_worker_count_follows_the_logs_layout() -> None:
    # Three row groups of 300 rows, each holding turns of every one of 100 sessions (issue #18's
    # `simulate --profile swe` log): any split decodes every row group in every batch.
    everywhere = _index([[0, 1, 2] * 3] * 100, rows_per_group=300, group_bytes=300 << 20)
    assert workers_for(everywhere, 2) == 1 and worker_cap(everywhere, 2) == 1
    # Two batches already decode it twice: the plan for any count is the one sweep.
    halves = everywhere.batches(everywhere.nbytes / 8)  # (cut where forced, at four times the size)
    assert len(halves) == 2 and decoded_bytes(halves) == 2 * decoded_bytes(plan_batches(everywhere, 1))
    assert len(plan_batches(everywhere, 2)) == len(plan_batches(everywhere, 8)) == 1
    # Sessions recorded one after another, each in row groups of its own: every core helps.
    in_turn = _index([[2 * n, 2 * n + 1] for n in range(100)], rows_per_group=1, group_bytes=1 << 20)
    assert workers_for(in_turn, 2) == 2 and workers_for(in_turn, 8) == 8 and worker_cap(in_turn, 8) is None
    assert decoded_bytes(plan_batches(in_turn, 8)) == decoded_bytes(plan_batches(in_turn, 1))
    # A small log is rebuilt in-process whatever the layout; one core is one worker.
    assert workers_for(_index([[0], [1]], rows_per_group=1, group_bytes=1 << 20), 8) == 1
    assert workers_for(in_turn, 1) == 1


def test_a_log_small_in_bytes_but_of_many_turns_gets_workers() -> None:
    # 100 sessions of 48 turns in 4 KiB (a format-2 log of short sessions stores a turn in little):
    # under 1 MiB of turn columns, but its 4,800 turns are work that two workers share (TURN_WORK_BYTES).
    many_turns = _index([[2 * n] * 24 + [2 * n + 1] * 24 for n in range(100)], rows_per_group=24, group_bytes=4 << 10)
    assert many_turns.nbytes < 1 << 20 and len(many_turns.log_rows) == 4800
    assert work_bytes(many_turns) > MIN_PARALLEL_BYTES
    assert workers_for(many_turns, 2) == 2 and worker_cap(many_turns, 2) is None
    # The same sessions with a tenth of the turns are rebuilt in-process.
    few_turns = _index([[2 * n] * 2 + [2 * n + 1] * 2 for n in range(100)], rows_per_group=2, group_bytes=4 << 10)
    assert workers_for(few_turns, 2) == 1
