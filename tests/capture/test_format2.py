"""Turn log format 2 (docs/spec.md §9): the writer's delta encoding, the reader's reconstruction.

Broken references are bad-input scenarios (``tests/bad_input/format2-*``); here:
random sessions give the same turns and the same samples file in both formats,
and the writer's choices (base, bounds, row groups) are what §9.4 says.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.helpers import write_log
from tests.support.session_strategy import sessions
from tito_cli.algorithm.linearize import Linearization, _Segment, linearize
from tito_cli.algorithm.policies import Slime03, SlimeV4
from tito_cli.algorithm.policy import Policy
from tito_cli.algorithm.router import route
from tito_cli.capture.delta import DeltaEncoder
from tito_cli.capture.writer import TurnLogWriter
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild
from tito_cli.turns import Turn


def read_turns(log: Path, policy: Policy | None = None) -> dict[str, list[Turn]]:
    key = {} if policy is None else {"key": policy.message_key}
    return {rows.session_id: parse_session(rows, **key) for rows in TurnLog.open([log]).iter_sessions()}


def turn_values(turn: Turn) -> tuple[Any, ...]:
    logprobs = None if turn.output_logprobs is None else turn.output_logprobs.tolist()
    return (
        turn.seq,
        turn.prompt_ids.tolist(),
        turn.output_ids.tolist(),
        logprobs,
        turn.finish_reason,
        json.dumps(turn.prompt_messages),  # key order included: messages are stored exactly
        json.dumps(turn.response_message),
        turn.tools,
        turn.metadata,
    )


def _write_both_formats(
    root: Path, batch: list[dict[str, Any]], candidates: int, max_rows: int
) -> tuple[list[dict[str, Any]], SlimeV4]:
    """The batch's sessions recorded interleaved (their turns and bases spread over files) as a format-1
    log in ``root/v1`` and a format-2 log in ``root/v2``; the records and the batch's policy."""
    records = [
        {**row, "session_id": f"s{i}"}
        for step in range(max(len(s["rows"]) for s in batch))
        for i, s in enumerate(batch)
        if step < len(s["rows"])
        for row in [s["rows"][step]]
    ]
    sessions_rows = [{"session_id": f"s{i}", "reward": s["reward"]} for i, s in enumerate(batch)]
    write_log(root / "v1", records, sessions_rows, max_rows=max_rows, format=1)
    write_log(root / "v2", records, sessions_rows, max_rows=max_rows, delta_candidates=candidates)
    return records, SlimeV4(fork_threshold=batch[0]["threshold"], reward_mode=batch[0]["reward_mode"])


@settings(max_examples=max(10, settings.default.max_examples // 5))
@given(st.lists(sessions(), min_size=1, max_size=3), st.integers(1, 4), st.integers(1, 7))
def test_both_formats_give_the_same_turns(batch: list[dict[str, Any]], candidates: int, max_rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        records, _ = _write_both_formats(root, batch, candidates, max_rows)
        v1, v2 = read_turns(root / "v1"), read_turns(root / "v2")
        assert v1.keys() == v2.keys()
        for sid in v1:
            assert [turn_values(t) for t in v1[sid]] == [turn_values(t) for t in v2[sid]]
        stored = pq.read_table(sorted((root / "v2").glob("turns-*.parquet")), columns=["base_seq"])
    assert len(stored) == len(records)


# Fewer examples than the turns' test above (each rebuilds twice); equal turns make equal samples.
@settings(max_examples=max(5, settings.default.max_examples // 10))
@given(st.lists(sessions(), min_size=1, max_size=3), st.integers(1, 4), st.integers(1, 7))
def test_both_formats_give_the_same_samples_file(batch: list[dict[str, Any]], candidates: int, max_rows: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        _, policy = _write_both_formats(root, batch, candidates, max_rows)
        rebuild([root / "v1"], root / "a.parquet", policy)
        rebuild([root / "v2"], root / "b.parquet", policy)
        assert (root / "a.parquet").read_bytes() == (root / "b.parquet").read_bytes()


def _messages(n: int, system: str = "main") -> list[dict[str, Any]]:
    return [{"role": "system", "content": system}] + [{"role": "user", "content": f"m{k}"} for k in range(n)]


def test_the_base_is_the_recent_turn_that_shares_most_not_only_the_last(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None, name="t") as w:
        main = list(range(100, 160))
        w.record_turn("s", main, [7, 8], None, "stop", _messages(1), {"role": "assistant", "content": "a"})
        # A sub-agent's two turns come in between (a different system prompt, other ids).
        w.record_turn("s", [1, 2, 3], [4], None, "stop", _messages(1, "sub"), None)
        w.record_turn("s", [1, 2, 3, 4, 5], [6], None, "stop", _messages(2, "sub"), None)
        # The parent resumes: prompt + output of seq 0, then new ids and messages.
        resumed = [*_messages(1), {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}]
        w.record_turn("s", [*main, 7, 8, 9, 9], [1], None, "stop", resumed, None)
    table = pq.read_table(tmp_path).sort_by("seq").to_pylist()
    assert [(r["base_seq"], r["shared_prompt_ids"], r["shared_messages"]) for r in table] == [
        (None, None, None),
        (None, None, None),  # nothing in common with seq 0 (another system prompt, other ids)
        (1, 4, 2),  # seq 1's prompt + output: 4 ids; its system and first user message
        (0, 62, 3),  # not seq 2: seq 0's prompt, output and response message
    ]
    assert table[3]["prompt_ids"] == [9, 9]
    assert json.loads(table[3]["prompt_messages"]) == [{"role": "user", "content": "more"}]
    [turns] = read_turns(tmp_path).values()
    assert turns[3].prompt_ids.tolist() == [*main, 7, 8, 9, 9] and turns[3].prompt_messages == resumed


def test_an_echo_with_reordered_keys_is_stored_not_shared(tmp_path: Path) -> None:
    response = {"role": "assistant", "content": "a", "tool_calls": []}
    echo = {"content": "a", "role": "assistant", "tool_calls": []}  # equal as a value, not as text
    with TurnLogWriter(tmp_path, max_age=None) as w:
        w.record_turn("s", [1, 2], [3], None, "stop", _messages(1), response)
        w.record_turn("s", [1, 2, 3, 4], [5], None, "stop", [*_messages(1), echo], None)
    second = pq.read_table(tmp_path).sort_by("seq").to_pylist()[1]
    assert (second["shared_messages"], second["prompt_messages"]) == (2, json.dumps([echo]))
    [turns] = read_turns(tmp_path).values()
    assert list(turns[1].prompt_messages[2]) == ["content", "role", "tool_calls"]


def test_held_turns_are_bounded_per_session_and_in_sessions() -> None:
    encoder = DeltaEncoder(candidates=2, max_sessions=3)
    ids = np.arange(1000, dtype=np.int32)
    for turn in range(5):
        for sid in ("a", "b", "c", "d"):
            delta = encoder.encode(sid, turn, ids[: 100 * (turn + 1)], ids[:0], _messages(turn), None)
            # Four sessions take turns, three are held: each session was forgotten before its turn.
            assert delta.base_seq is None
    assert encoder.open_sessions == 3
    text = sum(len(json.dumps(m)) for m in _messages(4))
    assert encoder.held_bytes == 3 * (4 * 500 + text)  # one turn each: b, c and d
    # Three unrelated conversations in "c" (other system prompts, other ids): two are held.
    for turn, system in zip(range(5, 8), "xyz", strict=True):
        delta = encoder.encode("c", turn, ids[turn * 100 : turn * 100 + 50], ids[:0], _messages(0, system), None)
        assert delta.base_seq is None
    texts = sum(len(json.dumps(m)) for system in "yz" for m in _messages(0, system))
    assert encoder.held_bytes == 2 * (4 * 500 + text) + 2 * 4 * 50 + texts
    # A turn that goes on from "y" (seq 6): stored against it, and "y" gives way to it.
    delta = encoder.encode("c", 8, ids[600:660], ids[:0], [*_messages(0, "y"), *_messages(0, "w")], None)
    assert (delta.base_seq, delta.shared_prompt_ids, delta.shared_messages) == (6, 50, 1)
    assert encoder.held_bytes == 2 * (4 * 500 + text) + 4 * (50 + 60) + texts + len(json.dumps(_messages(0, "w")[0]))
    encoder.forget("c")
    assert encoder.open_sessions == 2 and encoder.held_bytes == 2 * (4 * 500 + text)
    small = DeltaEncoder(max_bytes=4 * 150)
    small.encode("a", 0, ids[:100], ids[:0], [], None)
    small.encode("b", 0, ids[:100], ids[:0], [], None)  # over the byte cap: "a" is forgotten
    assert small.open_sessions == 1 and small.held_bytes == 400


def test_row_groups_are_bounded_by_bytes_as_well_as_rows(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None, format=1, row_group_rows=50, row_group_bytes=20_000) as w:
        for seq in range(60):
            # 4 KB of prompt ids a row (format 1 stores them whole): five rows fill 20 KB.
            w.record_turn("s", np.arange(1000), [1], None, "stop", "[]", None, seq=seq)
        w.record_turn("big", np.arange(10_000), [1], None, "stop", "[]", None)  # alone larger than the bound
    [path] = tmp_path.glob("turns-*.parquet")
    meta = pq.ParquetFile(path).metadata
    rows = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    assert sum(rows) == 61 and rows[0] == 1  # the 40 KB row ("big" sorts first) on its own
    assert set(rows[1:]) == {4}  # 4 rows of 4,000+ bytes: a fifth would pass 20,000


def _samples(linearization: Linearization) -> list[tuple[Any, ...]]:
    return [
        (s.tokens.tobytes(), s.loss_mask.tobytes(), s.rollout_log_probs.tobytes(), s.leaf, s.segment, s.seqs,
         s.trained_seqs, s.fork)
        for s in linearization.samples
    ]


def _decisions(linearization: Linearization) -> list[tuple[int, int, str, int]]:
    return [(d.leaf, d.seq, d.kind, d.lcp) for d in linearization.decisions]


def _built(turns: list[Turn]) -> list[int]:
    """Seqs of the delta turns whose whole prompt has been built (Turn.prompt_ids was asked for)."""
    return [t.seq for t in turns if t.base is not None and t._prompt is not None]


@settings(max_examples=max(10, settings.default.max_examples // 5))
@given(sessions(), st.integers(1, 4), st.sampled_from([SlimeV4, Slime03]))
def test_the_delta_fast_path_gives_the_samples_of_the_full_comparison(
    session: dict[str, Any], candidates: int, kind: type[Policy]
) -> None:
    policy = kind(fork_threshold=session["threshold"])
    rows = [{**r, "session_id": "s"} for r in session["rows"]]
    with tempfile.TemporaryDirectory() as tmp:
        write_log(Path(tmp) / "v2", rows, max_rows=4, delta_candidates=candidates)
        write_log(Path(tmp) / "v1", rows, max_rows=4, format=1)
        [turns] = read_turns(Path(tmp) / "v2", policy).values()
        [whole] = read_turns(Path(tmp) / "v1", policy).values()
    # Reading builds no delta turn's prompt; any part of one, from the arrays it is made of,
    # is the stored-whole prompt's (the cuts around the shared ids and the bases' ends).
    assert _built(turns) == []
    for turn, stored in zip(turns, whole, strict=True):
        assert turn.prompt_length == len(stored.prompt_ids)
        shared = 0 if turn.base is None else turn.base[1]
        for start, stop in [(0, turn.prompt_length), (shared - 1, shared + 1), (shared, turn.prompt_length),
                            (1, shared), (turn.prompt_length // 2, turn.prompt_length + 3)]:
            got = turn.prompt_slices(start, stop)
            assert np.concatenate(got).tolist() == stored.prompt_ids[max(start, 0) : stop].tolist()
    assert _built(turns) == []
    tree = route(turns, policy)
    fast = linearize(tree, policy)
    full = linearize(tree, policy, use_deltas=False)
    eager = linearize(route(whole, policy), policy)
    assert _samples(fast) == _samples(full) == _samples(eager)
    assert fast.decisions == full.decisions and fast.dropped_segments == full.dropped_segments
    assert _decisions(fast) == _decisions(eager)


def _both_formats(tmp_path: Path, records: list[tuple[list[int], list[int], list[dict[str, Any]], Any]],
                  policy: Policy) -> tuple[list[Turn], Linearization]:
    """One session recorded in format 2 and in format 1: its format-2 turns and their linearization.

    Asserts that the stored-whole turns give the same samples and decisions.
    """
    for format in (1, 2):
        with TurnLogWriter(tmp_path / f"v{format}", max_age=None, format=format) as w:
            for prompt, output, messages, response in records:
                w.record_turn("s", prompt, output, None, "stop", messages, response)
    [turns] = read_turns(tmp_path / "v2", policy).values()
    [whole] = read_turns(tmp_path / "v1", policy).values()
    linearization = linearize(route(turns, policy), policy)
    eager = linearize(route(whole, policy), policy)
    assert _samples(linearization) == _samples(eager) and _decisions(linearization) == _decisions(eager)
    return turns, linearization


def _assistant(content: str) -> dict[str, Any]:
    return {"role": "assistant", "content": content}


def _user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}


def test_a_delta_turn_that_forks_starts_a_sample_packed_from_its_bases(tmp_path: Path) -> None:
    prompt, output = list(range(100, 150)), list(range(200, 220))
    # Seq 1 re-tokenizes seq 0's output from its third id on: 18 ids of drift, a fork at threshold 4.
    drifted = [*prompt, *output[:2], *range(500, 520)]
    turns, linearization = _both_formats(tmp_path, [
        (prompt, output, _messages(1), _assistant("a")),
        (drifted, [300, 301], [*_messages(1), _assistant("a"), _user("x")], _assistant("b")),
        ([*drifted, 300, 301, 7], [400], [*_messages(1), _assistant("a"), _user("x"), _assistant("b"), _user("y")],
         None),
    ], SlimeV4(fork_threshold=4))
    assert turns[1].base == (turns[0], 52) and turns[2].base == (turns[1], 74)
    assert [(d.seq, d.kind, d.lcp) for d in linearization.decisions] == [(0, "start", 0), (1, "fork", 52),
                                                                        (2, "clean", 74)]
    # The second sample ends at seq 2: its tokens come from seq 0's prompt and output ids and
    # the new ids of seqs 1 and 2, and no delta turn's whole prompt was built on the way.
    assert linearization.samples[1].tokens.tolist() == [*drifted, 300, 301, 7, 400]
    assert _built(turns) == []


def test_a_delta_turn_whose_base_is_not_the_held_turn_is_compared_in_full(tmp_path: Path) -> None:
    prompt, output = list(range(100, 150)), list(range(200, 220))
    turns, linearization = _both_formats(tmp_path, [
        (prompt, output, _messages(1), _assistant("a")),
        ([*prompt, *output, 1, 2], [300, 301], [*_messages(1), _assistant("a"), _user("x")], _assistant("b")),
        # A rewind: seq 0's conversation goes on another way.  Its base is seq 1 (the newest that
        # shares most), but its leaf holds seq 0 when it comes: the general path decides it.
        ([*prompt, *output[:5], 9], [400, 401], [*_messages(1), _assistant("a"), _user("y")], _assistant("c")),
    ], SlimeV4(fork_threshold=4))
    assert turns[2].base == (turns[1], 55)
    assert _decisions(linearization) == [(0, 0, "start", 0), (0, 1, "clean", 70), (1, 0, "start", 0),
                                         (1, 2, "fork", 55)]
    assert _built(turns) == [2]


def test_a_parent_resuming_after_a_sub_agent_is_packed_from_its_base(tmp_path: Path) -> None:
    main = list(range(100, 160))
    turns, linearization = _both_formats(tmp_path, [
        (main, [7, 8], _messages(1), _assistant("a")),
        ([1, 2, 3], [4], _messages(1, "sub"), _assistant("s")),
        ([1, 2, 3, 4, 5], [6], [*_messages(1, "sub"), _assistant("s"), _user("r")], None),
        ([*main, 7, 8, 9, 9], [1], [*_messages(1), _assistant("a"), _user("more")], None),
    ], SlimeV4())
    assert turns[2].base == (turns[1], 4) and turns[3].base == (turns[0], 62)
    assert [(d.seq, d.kind) for d in linearization.decisions] == [(0, "start"), (3, "clean"), (1, "start"),
                                                                  (2, "clean")]
    assert [s.tokens.tolist() for s in linearization.samples] == [[*main, 7, 8, 9, 9, 1], [1, 2, 3, 4, 5, 6]]
    assert _built(turns) == []


def test_the_fast_path_compares_only_the_ids_after_the_shared_ones(tmp_path: Path) -> None:
    messages = _messages(1)
    with TurnLogWriter(tmp_path, max_age=None) as w:
        w.record_turn("s", np.arange(50), [7, 8], None, "stop", messages, {"role": "assistant", "content": "a"})
        w.record_turn("s", [*range(50), 7, 8, 9], [1], None, "stop",
                      [*messages, {"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}], None)
    [turns] = read_turns(tmp_path).values()
    assert turns[1].base == (turns[0], 52)
    segment = _Segment(fork=None)
    segment.absorb(turns[0], 0, trained=True, policy=SlimeV4())
    assert segment.common_prefix(turns[1]) == segment.common_prefix(turns[1], use_deltas=False) == 52
    # Were the shared ids compared, a change inside them would show: the fast path takes them as read.
    turns[1].prompt_ids = turns[1].prompt_ids.copy()
    turns[1].prompt_ids[10] = 999
    assert segment.common_prefix(turns[1], use_deltas=False) == 10
    assert segment.common_prefix(turns[1]) == 52
    # Routing starts where the base's prompt ended (docs/spec.md §3 from that node on).
    assert turns[1].extends == (turns[0], 2)
