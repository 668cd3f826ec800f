"""Memory that must not grow with the number of sessions, checked by structure (benchmarks/memory.py measures it).

What a run keeps per session is its id and a few numbers (docs/performance.md, "Where memory can still
grow"): the index, the sessions table and a worker's batch hold no Python object per session, the Parquet
writers cut row groups by sessions, and ``ls --limit`` holds only the rows it shows.
"""

from __future__ import annotations

import gc
import json
import os
import pickle
import random
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tito_cli.algorithm.session import SessionReport
from tito_cli.capture.writer import TurnLogWriter
from tito_cli.cli.native_env import NATIVE_OPTIONS
from tito_cli.export.groups import GroupCounts
from tito_cli.read.index import SessionPlaces
from tito_cli.read.turnlog import TurnLog
from tito_cli.report.facts import FIELDS, select_rows, sort_rows
from tito_cli.run.corpus import SessionOutput
from tito_cli.run.in_order import InOrder
from tito_cli.run.plan import plan_batches
from tito_cli.run.rebuild import rebuild
from tito_cli.turns import Reject

FIRST = [{"role": "user", "content": "hi"}]
REPLY = {"role": "assistant", "content": "yo"}


def tiny_log(folder: Path, sessions: int, *, group_of: int | None = None) -> Path:
    """``sessions`` sessions of two turns each, in one file and one row group."""
    with TurnLogWriter(folder, max_rows=1 << 20, max_bytes=1 << 40, max_age=None, name="tiny") as log:
        for i in range(sessions):
            sid = f"s{i:05d}"
            log.record_turn(sid, [1, 2, 3], [4, 5], [-0.1, -0.2], "stop", FIRST, REPLY)
            second = [*FIRST, REPLY, {"role": "user", "content": "more"}]
            log.record_turn(sid, [1, 2, 3, 4, 5, 6], [7], [-0.3], "stop", second, {"role": "assistant", "content": "k"})
            group = None if group_of is None else i // group_of
            log.finish_session(sid, 1.0, index=i, group_index=group, label=f"l{i}" if i % 2 else None)
    return folder


def python_objects(root: object) -> int:
    """Python objects reachable from ``root`` (numpy arrays count as one each; classes and modules not at all)."""
    seen: set[int] = set()
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType, types.FunctionType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, np.ndarray):
            continue
        todo.extend(gc.get_referents(obj))
    return len(seen)


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, TurnLog]:
    folder = tmp_path_factory.mktemp("tiny")
    return {n: TurnLog.open([tiny_log(folder / str(n), n, group_of=4)], index=True) for n in (20, 400)}


def test_the_index_holds_a_string_per_session_and_no_other_object(logs: dict[int, TurnLog]) -> None:
    # The same log layout (one file, one row group) at 20 and 400 sessions: only the id strings differ.
    small, large = (logs[n].index() for n in (20, 400))
    assert len(small.row_groups) == len(large.row_groups) == 1
    assert python_objects(large) - python_objects(small) == 400 - 20
    # Its rows are one array of four bytes a row; a place's row groups and rows are made from it when asked.
    assert large.log_rows.dtype == np.int32 and len(large.log_rows) == logs[400].num_turn_rows
    place = large.places["s00007"]
    assert place.groups.tolist() == [0, 0] and place.rows.tolist() == [14, 15]
    assert [p.session_id for p in large.in_id_order()][:3] == ["s00000", "s00001", "s00002"]


def test_the_sessions_table_holds_no_object_per_row(logs: dict[int, TurnLog]) -> None:
    small, large = (log.read_sessions() for log in (logs[20], logs[400]))
    # Its ids are the index's strings (no second copy): nothing per session but numbers in arrays and
    # compressed text chunks (one chunk each here).  (The counts of rows held are ints, which Python
    # shares below 257: the larger table may count one object more for each of its two text columns.)
    held = [python_objects(t.infos) - python_objects(t.infos._ids) for t in (small, large)]
    assert held[0] <= held[1] <= held[0] + 2
    index_ids = logs[400].index().session_ids
    assert all(a is b for a, b in zip(large.infos, index_ids, strict=True))
    info = large.infos["s00007"]
    assert (info.reward, info.index, info.group_index, info.label, info.rollout_id) == (1.0, 7, 1, "l7", None)
    assert info.source is not None and info.source.row == 7
    assert "s00400" not in large.infos and large.infos.get("nope") is None


def _report(k: int) -> SessionReport:
    return SessionReport(
        turns=k, seq_gaps=((k, k + 2),), drift_classes={"fork: other": k}, max_sample_tokens=k or None, no_samples="x"
    )


def test_outputs_waiting_for_their_turn_hold_no_object_per_session(tmp_path: Path) -> None:
    # Session ids unrelated to the order sessions finish in (random ids): everything arrives before
    # the first id in code-point order, and waits on disk, not as objects in memory.
    def waiting(count: int) -> tuple[int, InOrder, list[SessionOutput | Reject]]:
        ids = [f"s{k:05d}" for k in range(count)]
        in_order = InOrder(ids, tmp_path)
        arrivals: list[SessionOutput | Reject] = [
            Reject(sid, "bad", "f", 0)
            if k % 5 == 0
            else SessionOutput(sid, pa.table({"n": [k, k]}), _report(k))
            for k, sid in enumerate(ids)
        ]
        arrivals.reverse()
        for output in arrivals[:-1]:
            assert list(in_order.push(output)) == []
        return python_objects(in_order) - python_objects(ids), in_order, arrivals

    small, first, _ = waiting(20)
    first.close()
    large, in_order, arrivals = waiting(400)
    assert large == small
    emitted = [*in_order.push(arrivals[-1]), *in_order.finish()]
    in_order.close()
    assert [o.session_id for o in emitted] == [f"s{k:05d}" for k in range(400)]
    for k, output in enumerate(emitted):
        if k % 5 == 0:
            assert isinstance(output, Reject) and output.reason == "bad"
        else:
            assert isinstance(output, SessionOutput) and output.report == _report(k)
            assert output.table is not None and output.table.column("n").to_pylist() == [k, k]


def test_a_batch_holds_positions_and_pickles_only_its_sessions(logs: dict[int, TurnLog]) -> None:
    index = logs[400].index()
    batches = plan_batches(index, workers=2, batch_bytes=index.nbytes / 10)
    assert len(batches) >= 2  # (one row group: no clean cut, so a batch closes at 4x its size)
    for batch in batches:
        assert isinstance(batch.sessions, SessionPlaces)  # an array of positions, not a list of objects
    last = batches[-1]
    travelled = pickle.loads(pickle.dumps(last.sessions))
    assert len(travelled.log_index) == len(last.sessions) < len(index)
    assert [(p.session_id, p.groups.tolist(), p.rows.tolist(), p.nbytes) for p in travelled] == [
        (p.session_id, p.groups.tolist(), p.rows.tolist(), p.nbytes) for p in last.sessions
    ]


@pytest.mark.slow
@pytest.mark.parametrize("output_format", ["parquet", "skyrl", "trl"])
def test_every_parquet_output_cuts_a_row_group_every_1024_sessions(tmp_path: Path, output_format: str) -> None:
    # Each session's samples are tiny: by tokens alone, the whole corpus was one buffered row group.
    log = tiny_log(tmp_path / "logs", 2100)
    out = tmp_path / f"out.{output_format}"
    rebuild([log], out, output_format=output_format, workers=1)
    metadata = pq.ParquetFile(out).metadata
    assert [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)] == [1024, 1024, 52]


def test_group_counts_name_only_the_sessions_that_break_one_sample_a_session() -> None:
    counts = GroupCounts()
    for sid, group, samples in [("a", 0, 1), ("b", 0, 1), ("b", 0, 2), ("c", 0, 0), ("d", 1, 1), ("e", None, 3)]:
        counts.add(sid, group, samples)  # b's samples come in two parts, one after the other
    assert counts.to_dict() == {
        "groups": 2,
        "ungrouped_sessions": 1,
        "sessions_per_group": {"1": 1, "3": 1},
        "mismatched": [
            {
                "group_index": 0,
                "sessions": 3,
                "expected_samples": 3,
                "samples": 4,
                "sessions_not_one_sample": {"b": 3, "c": 0},
            }
        ],
    }
    fact = counts.groups()[0]
    assert fact.describe() == "group 0: 3 sessions, expected 3 samples, got 4 (b forked into 3, c has no sample)"
    assert list(fact.odd_sessions) == ["b", "c"]  # a, whose one sample is the expected one, is only counted


def test_ls_limit_keeps_the_order_of_a_full_sort() -> None:
    rng = random.Random(7)
    rows: list[dict[str, Any]] = []
    for n in range(300):
        row: dict[str, Any] = {name: rng.choice([None, 0, 1, 2, 5]) for name in FIELDS}
        row["session"] = f"s{rng.randrange(10**6):06d}-{n}"
        row["reward"] = rng.choice([None, 0.0, 0.5, 1.0])
        row["rejected"] = rng.choice([None, "bad", "worse"])
        rows.append(row)
    for key in FIELDS:
        for descending in (False, True):
            everything = sort_rows(list(rows), key, descending)
            for limit in (1, 7, 300, 1000):
                shown, count = select_rows(iter(rows), key, descending, limit)
                assert count == len(rows)
                assert shown == everything[:limit], (key, descending, limit)


def test_the_samples_writer_hands_freed_memory_back_after_a_row_group(tmp_path: Path) -> None:
    # In a fresh interpreter with the command line's allocator option, 256 MiB of Arrow memory written and
    # freed stays in RSS (the allocator keeps it for reuse) until a rebuild writes its samples' row group.
    # Under MIMALLOC_PURGE_DELAY=-1 it would stay: mimalloc then ignores the request.
    code = (
        "import json, os\n"
        "import numpy as np, pyarrow as pa\n"
        "from tito_cli.run.rebuild import rebuild\n"
        "def rss():\n"
        "    with open('/proc/self/statm') as f: return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE') >> 20\n"
        "buffer = pa.allocate_buffer(256 << 20)\n"
        "np.asarray(memoryview(buffer))[:] = 1\n"
        "del buffer\n"
        "kept = rss()\n"
        f"rebuild([{str(tiny_log(tmp_path / 'log', 3))!r}], {str(tmp_path / 's.parquet')!r}, workers=1)\n"
        "print(json.dumps([kept, rss()]))\n"
    )
    env = {**os.environ, **NATIVE_OPTIONS}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    kept, after = json.loads(proc.stdout)
    assert kept - after >= 200, (kept, after)
