"""The streaming read path: an index pass, row groups read only when needed and dropped after, ids as views."""

from __future__ import annotations

import gc
import json
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.helpers import write_log
from tito_cli._arrow import all_finite
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.session import rebuild_session
from tito_cli.errors import InvalidSessionError, SchemaError
from tito_cli.export.samples import session_table
from tito_cli.read import rows as readpath
from tito_cli.read import turnlog
from tito_cli.read.index import ReadBatch, RowGroup
from tito_cli.read.rows import read_batch
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import _MessageParser, parse_session
from tito_cli.schema import TURNS_SCHEMA, table_metadata
from tito_cli.turns import Reject, message_key


def _turn(sid: str, seq: int, prompt: list[int]) -> dict[str, Any]:
    return {
        "session_id": sid,
        "seq": seq,
        "prompt_ids": prompt,
        "output_ids": [90 + seq],
        "output_logprobs": [-0.5],
        "prompt_messages": [{"role": "user", "content": f"{sid}-{seq}"}],
    }


def _interleaved_log(tmp_path: Path, format: int = 2) -> Path:
    """Three sessions, recorded out of seq order, two rows per file."""
    turns = []
    for seq in (2, 0, 3, 1):
        for sid in ("b", "a", "c"):
            turns.append(_turn(sid, seq, list(range(seq + 3))))
    logs = tmp_path / "logs"
    write_log(logs, turns, max_rows=2, format=format)
    return logs


def test_rows_come_in_seq_order_with_their_file_and_row(tmp_path: Path) -> None:
    log = TurnLog.open([_interleaved_log(tmp_path)])
    sessions = list(log.iter_sessions())
    assert [s.session_id for s in sessions] == ["a", "b", "c"]
    for session in sessions:
        assert [r.seq for r in session.rows] == [0, 1, 2, 3]
        for raw in session.rows:
            # The reference points at the very row: read it back from the file.
            row = pq.read_table(raw.source.file).slice(raw.source.row, 1).to_pylist()[0]
            assert (row["session_id"], row["seq"]) == (session.session_id, raw.seq)
            assert raw.prompt_ids.tolist() == row["prompt_ids"]


def test_only_the_row_groups_holding_a_session_are_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logs = tmp_path / "logs"
    # Two rows per file: "x" lives in the first file only, "y" in the other two.
    write_log(logs, [_turn("x", 0, [1]), _turn("x", 1, [1, 2]), _turn("y", 0, [5]), _turn("y", 1, [6]),
                     _turn("y", 2, [7])], max_rows=2)
    log = TurnLog.open([logs])
    loaded: list[str] = []
    real = readpath._load_group

    def counting(files: Any, group: RowGroup, *args: Any) -> Any:
        loaded.append(Path(files[group.file].path).name)
        return real(files, group)

    monkeypatch.setattr(readpath, "_load_group", counting)
    [x] = list(log.iter_sessions(only={"x"}))
    assert [r.seq for r in x.rows] == [0, 1]
    assert loaded == ["turns-test-000001.parquet"]
    loaded.clear()
    list(log.iter_sessions(only={"y"}))
    assert sorted(loaded) == ["turns-test-000002.parquet", "turns-test-000003.parquet"]


def test_one_session_after_the_whole_index_is_not_a_second_index_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    write_log(logs, [_turn("x", 0, [1]), _turn("y", 0, [5]), _turn("x", 1, [1, 2]), _turn("y", 1, [6])], max_rows=2)
    log = TurnLog.open([logs])
    passes: list[object] = []
    real = turnlog.build_index

    def counting(files: Any, only: Any = None, **options: Any) -> Any:
        passes.append(only)
        return real(files, only, **options)

    monkeypatch.setattr(turnlog, "build_index", counting)
    assert log.session_ids() == ["x", "y"]  # as `tito inspect` resolves an id or prefix
    [y] = list(log.iter_sessions(only={"y"}))
    assert [r.seq for r in y.rows] == [0, 1] and list(y.rows[1].prompt_ids) == [6]
    assert passes == [None]
    # Without the whole index, asking for one session reads only what it needs.
    passes.clear()
    [x] = list(TurnLog.open([logs]).iter_sessions(only={"x"}))
    assert [r.seq for r in x.rows] == [0, 1] and passes == [{"x"}]


def test_row_groups_are_dropped_after_their_last_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = [_turn(f"s{n}", seq, [n, seq]) for n in range(4) for seq in range(3)]
    logs = tmp_path / "logs"
    write_log(logs, turns, max_rows=3)  # one session per file
    log = TurnLog.open([logs])
    alive: list[weakref.ref[Any]] = []
    real = readpath._load_group

    def tracking(files: Any, group: RowGroup, *args: Any) -> Any:
        columns = real(files, group)
        alive.append(weakref.ref(columns))
        return columns

    monkeypatch.setattr(readpath, "_load_group", tracking)
    index = log.index()
    for n, session in enumerate(read_batch(log.turn_files, ReadBatch(index.row_groups, index.in_log_order()))):
        del session
        gc.collect()
        # Only the current session's row group is still held (the reader drops it on the next step).
        assert sum(ref() is not None for ref in alive) <= 1, n
    assert len(alive) == 4


def test_ids_stay_views_into_the_decoded_column(tmp_path: Path) -> None:
    log = TurnLog.open([_interleaved_log(tmp_path, format=1)])
    session = next(log.iter_sessions(only={"a"}))
    turns = parse_session(session)
    for raw, turn in zip(session.rows, turns, strict=False):
        assert turn.prompt_ids.dtype == np.int32
        assert np.shares_memory(turn.prompt_ids, raw.prompt_ids)
        assert turn.output_logprobs is not None and turn.output_logprobs.dtype == np.float32


def test_statistics_vouch_for_the_ids_only_when_the_file_has_them(tmp_path: Path) -> None:
    folder = _interleaved_log(tmp_path)
    # The capture writer writes column statistics: validation need not scan the ids again.
    rows = [row for session in TurnLog.open([folder]).iter_sessions() for row in session.rows]
    assert rows and all(row.ids_in_range for row in rows)
    # The same rows in a file without statistics: every row's ids are checked.
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in folder.glob("*.parquet"):
        pq.write_table(pq.read_table(path), bare / path.name, write_statistics=False)
    rows = [row for session in TurnLog.open([bare]).iter_sessions() for row in session.rows]
    assert rows and not any(row.ids_in_range for row in rows)


def test_other_integer_types_are_read_and_checked(tmp_path: Path) -> None:
    schema = pa.schema(
        [f.with_type(pa.list_(pa.int64())) if f.name in ("prompt_ids", "output_ids") else f for f in TURNS_SCHEMA]
    ).with_metadata(table_metadata("turns"))
    rows = {
        "session_id": ["a", "a", "b"],
        "seq": [1, 0, 0],
        "prompt_ids": [[1, 2, 3], [1], [2**40]],
        "output_ids": [[4], [2], [5]],
        "output_logprobs": [None, [-1.0], None],
        "finish_reason": ["stop"] * 3,
        "prompt_messages": [json.dumps([{"role": "user", "content": "q"}])] * 3,
        "response_message": [None] * 3,
        "tools": [None] * 3,
        "metadata": [None] * 3,
        "timestamp": [None] * 3,
        "ill_formed": [None] * 3,
    }
    (tmp_path / "logs").mkdir()
    pq.write_table(pa.table(rows, schema=schema), tmp_path / "logs" / "turns.parquet")
    a, b = TurnLog.open([tmp_path / "logs"]).iter_sessions()
    turns = parse_session(a)
    assert [t.seq for t in turns] == [0, 1]
    assert turns[1].prompt_ids.tolist() == [1, 2, 3] and turns[1].prompt_ids.dtype == np.int32
    assert turns[0].output_logprobs is not None and turns[1].output_logprobs is None
    with pytest.raises(InvalidSessionError, match=r"prompt_ids holds 1099511627776") as caught:
        parse_session(b)
    assert caught.value.row == 2 and caught.value.session_id == "b"


def test_a_null_session_id_names_file_and_row(tmp_path: Path) -> None:
    table = pa.table(
        {"session_id": ["a", None], "seq": [0, 1], "prompt_ids": [[1], [2]], "output_ids": [[3], [4]],
         "finish_reason": ["stop"] * 2, "prompt_messages": ["[]"] * 2},
    )
    (tmp_path / "logs").mkdir()
    pq.write_table(table, tmp_path / "logs" / "t.parquet")
    log = TurnLog.open([tmp_path / "logs"])
    with pytest.raises(SchemaError) as caught:
        log.session_ids()
    assert caught.value.row == 1 and caught.value.file.endswith("t.parquet")
    # Asking for one session does not trip over another's bad row.
    [a] = list(TurnLog.open([tmp_path / "logs"]).iter_sessions(only={"a"}))
    assert a.session_id == "a"


def test_a_session_id_that_is_not_utf8_names_file_and_row(tmp_path: Path) -> None:
    sids = pa.array([b"a", b"b\xff"], pa.binary()).view(pa.string())
    table = pa.table(
        {"session_id": sids, "seq": [0, 1], "prompt_ids": [[1], [2]], "output_ids": [[3], [4]],
         "finish_reason": ["stop"] * 2, "prompt_messages": ["[]"] * 2},
    )
    (tmp_path / "logs").mkdir()
    pq.write_table(table, tmp_path / "logs" / "t.parquet")
    with pytest.raises(SchemaError, match="session_id is not valid UTF-8") as caught:
        TurnLog.open([tmp_path / "logs"]).session_ids()
    assert caught.value.row == 1 and caught.value.file.endswith("t.parquet")


def test_message_parser_reuse_gives_the_full_parse() -> None:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    texts = [json.dumps(messages)]
    for n in range(6):
        messages = [*messages, {"content": f"m{n}", "role": "user" if n % 2 else "assistant", "n": [n, 1.0]}]
        texts.append(json.dumps(messages, indent=None if n % 3 else 1))
    texts.append(texts[2])  # a resent older prompt
    texts.append(json.dumps([*messages[:3], {"role": "user", "content": "fork"}]))
    parser = _MessageParser(message_key)
    reused = 0
    for number, text in enumerate(texts):
        parsed = parser.parse(text, number)
        assert parsed.messages == json.loads(text)
        assert parsed.keys == [message_key(m) for m in json.loads(text)]
        if parsed.source is not None:
            # It extends an earlier prompt: that prompt's messages, as the same objects.
            reused += 1
            earlier = json.loads(texts[parsed.source])
            assert parsed.source < number and parsed.shared == len(earlier)
            assert parsed.messages[: parsed.shared] == earlier
    assert reused >= 4


def test_logprob_finiteness_is_exact_at_the_float_limits() -> None:
    # The float32 check sums in float64: huge finite values must not overflow into a false alarm.
    assert all_finite(np.full(1000, -3.4e38, dtype=np.float32))
    assert all_finite(np.full(4, -1.7e308))  # float64 values are checked one by one
    assert all_finite(np.zeros(0, dtype=np.float32))
    for bad in (np.nan, np.inf, -np.inf):
        assert not all_finite(np.array([-0.5, bad, -1.0], dtype=np.float32))
        assert not all_finite(np.array([-0.5, bad]))


def test_sample_rows_keep_the_linearized_arrays(tmp_path: Path) -> None:
    # session_table hands each sample's arrays to Arrow as they are: no copy of any token.
    log = TurnLog.open([_interleaved_log(tmp_path)])
    session = next(log.iter_sessions(only={"a"}))
    result = rebuild_session("a", parse_session(session), None, SlimeV4())
    assert len(result.samples) >= 2
    table = session_table(result)
    for column, attribute in (("tokens", "tokens"), ("loss_mask", "loss_mask"),
                              ("rollout_log_probs", "rollout_log_probs")):
        entries = table.column(column).to_pylist()
        chunks = table.column(column).chunks
        for row, sample in enumerate(result.samples):
            array = getattr(sample, attribute)
            assert entries[row] == pytest.approx(array.tolist())
            values = chunks[row].values
            assert values.buffers()[1].address == array.ctypes.data, (column, row)


def test_the_samples_writer_buffers_a_bounded_number_of_sessions(tmp_path: Path) -> None:
    """Row groups are cut by sessions as well as tokens: tiny sessions never pile up (issue #22).

    Each buffered session is a small Arrow table of its own (kilobytes of
    objects, however few tokens); by the token budget alone, 40,000 tiny
    sessions were all held until the end.
    """
    from tests.bad_input.kit import case, write_turns
    from tito_cli._atomic import publish
    from tito_cli.export.base import SinkContext
    from tito_cli.export.parquet import SamplesWriter
    from tito_cli.run.corpus import Corpus

    write_turns(tmp_path / "logs" / "turns.parquet", case("cases-threshold-1024/case-2.7", "tiny"))
    (result,) = Corpus.open([tmp_path / "logs"]).results()
    assert not isinstance(result, Reject)
    table = session_table(result)
    out = tmp_path / "samples.parquet"
    most = 0
    writer = SamplesWriter(out, SinkContext(SlimeV4()), row_group_sessions=8)
    for _ in range(50):
        writer.add(table)
        most = max(most, len(writer._tables))
    publish(writer.close())
    assert most < 8
    meta = pq.ParquetFile(out).metadata
    assert meta.num_row_groups == 7  # 6 of 8 sessions, then the last 2
    assert meta.num_rows == 50 * table.num_rows
