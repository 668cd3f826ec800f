"""Row groups too big to decode whole, read in slices of rows (issue #18).

Sliced reads must change nothing but memory and time: the same samples, the same
rejects naming the same file rows, the same errors, at any worker count.  The
slices are forced tiny here (``_slice_rows``, the rows per slice, patched), so
that every session straddles slices and format-2 bases lie in other slices.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.bad_input_runs import SCENARIOS, build_scenario, check_outcome, rebuild_args
from tests.support.cli import tito
from tests.support.helpers import REPO, write_log
from tito_cli.read import index_pass
from tito_cli.read import rows as readpath
from tito_cli.read.index import LogIndex, ReadBatch, RowGroup, SessionPlace
from tito_cli.read.rows import read_batch
from tito_cli.read.turnlog import TurnLog
from tito_cli.render.plain import to_plain
from tito_cli.render.summary import render_rebuild_summary
from tito_cli.run import plan as planning
from tito_cli.run.compact import compact
from tito_cli.run.plan import MAX_DECODE_OVERHEAD, decoded_bytes, plan_batches, worker_cap, workers_for
from tito_cli.run.rebuild import rebuild

DEMO = REPO / "fixtures" / "logs"


def _slice_rows_of(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """Read every row group of more than ``rows`` rows in slices of ``rows`` rows."""
    monkeypatch.setattr(index_pass, "_slice_rows", lambda size, total: min(max(total, 1), rows))


@pytest.fixture(scope="module")
def demo_v1(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo log in format 1, one row group (as a foreign writer might leave it)."""
    out = tmp_path_factory.mktemp("demo") / "v1"
    compact([DEMO], out, format=1, row_group_bytes=1 << 40)
    return out


@pytest.fixture(scope="module")
def unsliced(demo_v1: Path, tmp_path_factory: pytest.TempPathFactory) -> Callable[[int], tuple[Path, bytes]]:
    """The demo log in ``format`` (one row group) and the samples an unsliced one-worker rebuild writes of it."""
    made: dict[int, tuple[Path, bytes]] = {}

    def of(format: int) -> tuple[Path, bytes]:
        if format not in made:
            log = DEMO if format == 2 else demo_v1
            [turns_file] = log.glob("turns-*.parquet")
            assert pq.ParquetFile(turns_file).metadata.num_row_groups == 1
            expected = tmp_path_factory.mktemp("unsliced") / "whole.parquet"
            rebuild([log], expected, workers=1)
            assert not any(g.slice_rows for g in TurnLog.open([log]).index().row_groups)
            made[format] = log, expected.read_bytes()
        return made[format]

    return of


@pytest.mark.parametrize("rows", [1, 3, 50])
@pytest.mark.parametrize("format", [1, 2])
def test_a_one_row_group_log_is_read_in_slices_that_sessions_straddle(
    format: int, rows: int, unsliced: Callable[[int], tuple[Path, bytes]], monkeypatch: pytest.MonkeyPatch
) -> None:
    log, _ = unsliced(format)
    [turns_file] = log.glob("turns-*.parquet")
    _slice_rows_of(monkeypatch, rows)
    index = TurnLog.open([log]).index()
    assert len(index.row_groups) == -(-pq.ParquetFile(turns_file).metadata.num_rows // rows)
    straddling = [p for p in index.in_log_order() if len(set(p.groups.tolist())) > 1]
    assert len(straddling) >= (len(index.places) if rows == 1 else 5), rows


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "batch_bytes"), [(1, None), (2, 1), (2, 40_000)])
@pytest.mark.parametrize("rows", [1, 3, 50])
@pytest.mark.parametrize("format", [1, 2])
def test_sliced_reads_give_the_unsliced_samples_at_any_worker_count(
    format: int,
    rows: int,
    workers: int,
    batch_bytes: int | None,
    unsliced: Callable[[int], tuple[Path, bytes]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log, expected = unsliced(format)
    _slice_rows_of(monkeypatch, rows)
    out = tmp_path / "sliced.parquet"
    rebuild([log], out, workers=workers, batch_bytes=batch_bytes)
    assert out.read_bytes() == expected


def test_format2_bases_in_other_slices_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    # The demo log's turns are stored against their previous turn: with three-row slices,
    # a third of them have their base in the slice before.
    _slice_rows_of(monkeypatch, 3)
    table = pq.read_table(next(DEMO.glob("turns-*.parquet")), columns=["session_id", "seq", "base_seq"]).to_pylist()
    row_of = {(r["session_id"], r["seq"]): n for n, r in enumerate(table)}
    across = [n for n, r in enumerate(table) if r["base_seq"] is not None
              and row_of[(r["session_id"], r["base_seq"])] // 3 != n // 3]
    assert len(across) > len(table) // 4
    log = TurnLog.open([DEMO])
    index = log.index()
    session = next(iter(read_batch(log.turn_files, ReadBatch(index.row_groups, [index.places["qwen3-0-0000"]]))))
    whole = next(TurnLog.open([DEMO]).iter_sessions(only={"qwen3-0-0000"}))
    assert [r.source for r in session.rows] == [r.source for r in whole.rows]
    assert [r.base_seq for r in session.rows] == [r.base_seq for r in whole.rows]


@pytest.mark.slow
@pytest.mark.parametrize("rows", [1, 3])
@pytest.mark.parametrize("folder", SCENARIOS, ids=[f.name for f in SCENARIOS])
def test_bad_input_in_slices_is_rejected_naming_the_same_file_row(
    folder: Path, rows: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every scenario of tests/bad_input (null cells, nulls inside id lists, broken format-2
    # references, bad seq ...) with its row groups cut into slices: the same outcome.
    _slice_rows_of(monkeypatch, rows)
    expected = build_scenario(folder, tmp_path / "logs")
    out = tmp_path / "out" / "samples.parquet"
    out.parent.mkdir()
    result = tito(*rebuild_args(tmp_path / "logs", out, expected))
    check_outcome(expected, out, result.exit_code, result.stdout, result.stderr)


@pytest.fixture
def young_heap() -> Iterator[None]:
    """gc.collect() walks only what the test makes: the objects alive before it are frozen (in a full
    run, collecting the whole suite's heap once per session made the test below take 18 s)."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@pytest.mark.usefixtures("young_heap")
def test_each_slice_is_decoded_once_and_dropped_after_its_last_session(monkeypatch: pytest.MonkeyPatch) -> None:
    _slice_rows_of(monkeypatch, 5)
    log = TurnLog.open([DEMO])
    index = log.index()
    decoded: list[int] = []
    alive: list[weakref.ref[Any]] = []
    real = readpath._SliceStream.read

    def tracking(self: Any, group: RowGroup) -> Any:
        columns = real(self, group)
        decoded.append(group.offset)
        alive.append(weakref.ref(columns))
        return columns

    monkeypatch.setattr(readpath._SliceStream, "read", tracking)
    order = index.in_log_order()
    for place, session in zip(order, read_batch(log.turn_files, ReadBatch(index.row_groups, order)), strict=True):
        del session
        gc.collect()
        # The demo's sessions were recorded one after another: only this session's slices are held.
        assert sum(ref() is not None for ref in alive) <= len(set(place.groups.tolist())), place.session_id
    assert decoded == [g.offset for g in index.row_groups]

    # A batch of the last session alone decodes the slices before it on the way, and keeps none of them.
    decoded.clear()
    alive.clear()
    last = order[-1]
    sessions = read_batch(log.turn_files, ReadBatch(index.row_groups, [last]))
    session = next(sessions)
    assert len(decoded) == max(last.groups.tolist()) + 1 and len(session.rows) == len(last.groups)
    gc.collect()
    assert sum(ref() is not None for ref in alive) == len(set(last.groups.tolist()))
    assert next(sessions, None) is None


def _sliced_index(
    sessions: list[list[int]], groups: int, slices: int, rows_per_slice: int, slice_bytes: float
) -> LogIndex:
    """``groups`` huge row groups of ``slices`` slices each; session i has a row in each slice of ``sessions[i]``
    (numbered across the row groups)."""
    per_row = slice_bytes / rows_per_slice
    size = rows_per_slice
    row_groups = [
        RowGroup(g, 0, k * size, size, per_row, offset=k * size, slice_rows=size)
        for g in range(groups)
        for k in range(slices)
    ]
    places = {}
    for number, used in enumerate(sessions):
        sid = f"s{number:03d}"
        places[sid] = SessionPlace(sid, np.array(used), np.arange(len(used)), int(len(used) * per_row))
    return LogIndex(row_groups, places)


def test_plans_count_a_slice_from_the_start_of_its_row_group() -> None:
    # Issue #18's shape: three files of one huge row group each (here 4 slices of 64 MiB),
    # 48 sessions recorded one after another, 4 per slice.
    in_turn = _sliced_index([[k // 4] * 25 for k in range(48)], groups=3, slices=4, rows_per_slice=100,
                            slice_bytes=64 << 20)
    once = decoded_bytes(plan_batches(in_turn, 1))
    assert once == 12 * (64 << 20)
    # The last session of a row group alone costs that whole row group: pyarrow decodes the slices before it.
    assert decoded_bytes([ReadBatch(in_turn.row_groups, [in_turn.places["s015"]])]) == 4 * (64 << 20)
    # Eight batches per worker would decode the log 2.5 times: the plan has fewer, larger ones.
    assert decoded_bytes(planning._spread(in_turn, 2)) >= 2.5 * once
    for workers in (2, 4, 8):
        plan = plan_batches(in_turn, workers)
        assert 2 <= len(plan) < len(planning._spread(in_turn, workers)), workers
        assert decoded_bytes(plan) <= MAX_DECODE_OVERHEAD * once, workers
    assert workers_for(in_turn, 2) == 2 and worker_cap(in_turn, 2) is None
    # Every session straddles two slices: no clean cut anywhere, so the plan cuts at the size.
    chained = _sliced_index([[k // 4, k // 4 + 1] * 12 for k in range(44)], groups=3, slices=4, rows_per_slice=100,
                            slice_bytes=64 << 20)
    assert len(chained.batches(chained.nbytes / 2)) == 1
    plan = plan_batches(chained, 2)
    assert len(plan) >= 2 and decoded_bytes(plan) <= MAX_DECODE_OVERHEAD * decoded_bytes(plan_batches(chained, 1))
    # One huge row group: even two batches decode it 1.5 times (the second decodes the first's
    # slices on its way), so the log is one batch and an explicit count comes down to one.
    one_group = _sliced_index([[k // 4] * 25 for k in range(32)], groups=1, slices=8, rows_per_slice=100,
                              slice_bytes=64 << 20)
    halves = one_group.batches(one_group.nbytes / 2)
    assert len(halves) == 2 and decoded_bytes(halves) == 1.5 * decoded_bytes(plan_batches(one_group, 1))
    assert len(plan_batches(one_group, 2)) == 1 and worker_cap(one_group, 2) == 1


def _shared_row_groups_log(folder: Path) -> None:
    """Six sessions recorded at the same time: each of its three row groups holds turns of all six."""
    turns = []
    for seq in range(6):
        for n in range(6):
            prompt = list(range(n * 1000, n * 1000 + 10 * (seq + 1)))
            turns.append({"session_id": f"s{n}", "seq": seq, "prompt_ids": prompt, "output_ids": [7, 8],
                          "output_logprobs": [-0.5, -0.5], "prompt_messages": [{"role": "user", "content": f"{seq}"}]})
    [written] = write_log(folder.with_name("written"), turns, format=1)
    # (The capture writer keeps a session's turns together: rewritten in recording order.)
    table = pq.read_table(written).sort_by([("seq", "ascending"), ("session_id", "ascending")])
    folder.mkdir()
    pq.write_table(table, folder / "turns-shared.parquet", row_group_size=12)


def test_an_explicit_worker_count_is_capped_with_a_note_when_batches_would_decode_it_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    _shared_row_groups_log(logs)
    assert len(TurnLog.open([logs]).index().row_groups) == 3
    monkeypatch.setattr(planning, "MIN_PARALLEL_BYTES", 0)  # the log counts as big enough for workers
    assert worker_cap(TurnLog.open([logs]).index(), 2) == 1
    one = rebuild([logs], tmp_path / "one.parquet", workers=1)
    assert one.workers_capped is None
    two = rebuild([logs], tmp_path / "two.parquet", workers=2)
    assert two.workers_capped == (2, 1)
    text = to_plain(render_rebuild_summary(two), width=400)
    assert "note: rebuilt with 1 worker, not 2: this log's sessions share its row groups" in text
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    # Chosen by tito, not told: no note (the default never asks for more than the log can use).
    assert rebuild([logs], tmp_path / "default.parquet").workers_capped is None
    # Forced batches (--batch-mb) are taken as asked.
    assert rebuild([logs], tmp_path / "forced.parquet", workers=2, batch_bytes=1).workers_capped is None
    assert (tmp_path / "forced.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
