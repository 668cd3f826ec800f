"""Routing (SPEC §3): how turns fold into the message tree."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.support.engine_helpers import msg, turn
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.router import route

S, U = msg("system", "S"), msg("user", "u")


def test_continuation_mounts_below_the_generated_node() -> None:
    t0 = turn(0, [S, U], [1, 2], [3], response=msg("assistant", "a"))
    t1 = turn(1, [S, U, msg("assistant", "a"), msg("tool", "t")], [1, 2, 3, 4], [5])
    tree = route([t0, t1], SlimeV4())
    (system,) = tree.root.children
    (user,) = system.children
    (first,) = user.children
    assert first.turn is t0 and first.turn_index == 1
    (tool,) = first.children
    (second,) = tool.children
    assert second.turn is t1 and second.turn_index == 2
    assert [n.role for n in second.chain()] == ["system", "user", "assistant", "tool", "assistant"]


def test_key_order_is_irrelevant_but_numbers_and_list_order_matter() -> None:
    a = {"role": "user", "content": "x", "n": 1}
    same = {"n": 1, "content": "x", "role": "user"}
    as_float = {"role": "user", "content": "x", "n": 1.0}
    tree = route(
        [turn(0, [a], [1], [2]), turn(1, [same], [1], [3]), turn(2, [as_float], [1], [4])],
        SlimeV4(),
    )
    assert len(tree.root.children) == 2  # `same` matched `a`; `1.0` started a new subtree
    assert len(tree.root.children[0].children) == 2  # two sibling leaves under the shared user node


def test_resent_prompt_adds_a_sibling_leaf() -> None:
    tree = route([turn(0, [S, U], [1], [2]), turn(1, [S, U], [1], [3])], SlimeV4())
    user = tree.root.children[0].children[0]
    assert [c.turn_index for c in user.children] == [1, 2]
    assert len(tree.leaves()) == 2


def test_new_system_prompt_starts_a_new_subtree() -> None:
    sub = msg("system", "sub-agent")
    tree = route([turn(0, [S, U], [1], [2]), turn(1, [sub, U], [9], [3])], SlimeV4())
    assert [c.message for c in tree.root.children] == [S, sub]


def test_empty_prompt_is_skipped_without_a_turn_index() -> None:
    tree = route([turn(0, [], [1], [2]), turn(1, [S, U], [1], [3])], SlimeV4())
    assert tree.skipped == [0]
    assert tree.leaves()[0].turn_index == 1


def test_null_response_matches_nothing() -> None:
    t0 = turn(0, [S, U], [1], [2], response=None)
    t1 = turn(1, [S, U, msg("assistant", "x")], [1, 2], [3])
    tree = route([t0, t1], SlimeV4(fork_threshold=0))
    user = tree.root.children[0].children[0]
    # The echo is mounted routing-only beside the generated leaf, never trained.
    assert [c.turn is not None for c in user.children] == [True, False]
    assert user.children[1].children[0].turn is t1


def test_short_rewrite_is_absorbed() -> None:
    t0 = turn(0, [S, U], [1, 2], [3, 4], response=msg("assistant", "a"))
    rewritten = msg("assistant", "a ")  # the client re-rendered the message
    t1 = turn(1, [S, U, rewritten, msg("tool", "t")], [1, 2, 3, 5, 6], [7])
    tree = route([t0, t1], SlimeV4(fork_threshold=3))
    (node,) = tree.merges
    assert node.turn is None and node.message == rewritten
    assert node.merged_rewrite is not None
    assert node.merged_rewrite.abandoned_turn_index == 1
    assert node.merged_rewrite.abandoned_response_tokens == 2
    assert node.children[0].children[0].turn is t1
    # A later prompt carrying the rewritten message routes through the merged node.
    t2 = turn(2, [S, U, rewritten, msg("tool", "t"), msg("assistant", "r1"), msg("user", "more")], [1], [8])
    tree = route([t0, t1, t2], SlimeV4(fork_threshold=3))
    assert len(tree.leaves()) == 1 and tree.leaves()[0].turn is t2


def test_rewrite_of_a_long_output_is_not_absorbed() -> None:
    t0 = turn(0, [S, U], [1], [3, 4, 5], response=msg("assistant", "a"))
    t1 = turn(1, [S, U, msg("assistant", "a "), msg("tool", "t")], [1], [7])
    tree = route([t0, t1], SlimeV4(fork_threshold=3))  # 3 output ids is not fewer than 3
    assert tree.merges == []
    user = tree.root.children[0].children[0]
    assert user.children[0].turn is t0 and user.children[1].turn is None


def test_threshold_zero_disables_absorption() -> None:
    t0 = turn(0, [S, U], [1], [3], response=msg("assistant", "a"))
    t1 = turn(1, [S, U, msg("assistant", "a "), msg("tool", "t")], [1], [7])
    assert route([t0, t1], SlimeV4(fork_threshold=0)).merges == []


def test_ambiguous_rewrite_absorbs_nothing() -> None:
    t0 = turn(0, [S, U], [1], [3], response=msg("assistant", "a"))
    t1 = turn(1, [S, U], [1], [4], response=msg("assistant", "b"))
    t2 = turn(2, [S, U, msg("assistant", "c"), msg("tool", "t")], [1], [7])
    tree = route([t0, t1, t2], SlimeV4())
    assert tree.merges == [] and tree.ambiguous_rewrites == [2]
    user = tree.root.children[0].children[0]
    assert [c.turn_index for c in user.children] == [1, 2, None]


def test_generated_node_with_children_is_not_a_rewrite_candidate() -> None:
    t0 = turn(0, [S, U], [1], [3], response=msg("assistant", "a"))
    t1 = turn(1, [S, U, msg("assistant", "a"), msg("tool", "t")], [1], [4])
    t2 = turn(2, [S, U, msg("assistant", "a "), msg("tool", "t")], [1], [5])
    tree = route([t0, t1, t2], SlimeV4())
    assert tree.merges == []


def test_tools_ride_on_the_first_mounted_system_node() -> None:
    tools = [{"type": "function", "function": {"name": "bash"}}]
    t0 = turn(0, [S, U], [1], [2])
    t0.tools = tools
    tree = route([t0], SlimeV4())
    assert tree.root.children[0].tools == tools


def _shape(node):  # type: ignore[no-untyped-def]
    """A tree as nested tuples of what routing decides: keys, turns, merges."""
    turn_seq = node.turn.seq if node.turn is not None else None
    merged = node.merged_rewrite.abandoned_seq if node.merged_rewrite is not None else None
    return (node.key, turn_seq, merged, tuple(_shape(c) for c in node.children))


def test_starting_below_an_extended_prompt_routes_like_the_full_walk() -> None:
    from tests.support.helpers import REPO
    from tito_cli.read.turnlog import TurnLog
    from tito_cli.read.validate import parse_session

    shortcuts = 0
    for rows in TurnLog.open([REPO / "fixtures" / "logs"]).iter_sessions():
        turns = parse_session(rows)
        shortcuts += sum(t.extends is not None for t in turns)
        with_shortcut = route(turns, SlimeV4())
        for t in turns:
            t.extends = None
        assert _shape(route(turns, SlimeV4()).root) == _shape(with_shortcut.root), rows.session_id
    assert shortcuts > 100


def test_a_prompt_after_a_long_sub_agent_extends_its_parent_turn() -> None:
    # A sub-agent's turns come between two of its parent's; the parent's next prompt must still be
    # found as an extension of its previous one (not parsed and routed from the root again).
    from tito_cli.read.columns import RawTurn
    from tito_cli.read.rows import SessionRows
    from tito_cli.read.validate import parse_session
    from tito_cli.turns import RowRef

    def row(seq: int, messages: list[dict[str, str]]) -> RawTurn:
        return RawTurn(
            seq=seq,
            prompt_ids=np.arange(len(messages), dtype=np.int32),
            output_ids=np.array([7], dtype=np.int32),
            output_logprobs=None,
            finish_reason="stop",
            prompt_messages=np.frombuffer(json.dumps(messages).encode(), dtype=np.uint8),
            response_message=None,
            tools=None,
            metadata=None,
            source=RowRef("test", seq),
        )

    parent = [{"role": "system", "content": "main"}, {"role": "user", "content": "go"}]
    sub = [{"role": "system", "content": "sub"}, {"role": "user", "content": "look"}]
    rows = [row(0, parent)]
    for step in range(10):
        sub = [*sub, {"role": "assistant", "content": f"a{step}"}, {"role": "tool", "content": f"t{step}"}]
        rows.append(row(1 + step, sub))
    rows.append(row(11, [*parent, {"role": "assistant", "content": "spawned"}, {"role": "tool", "content": "done"}]))
    turns = parse_session(SessionRows("s", rows))
    assert turns[-1].extends == (turns[0], 2)
    assert turns[-1].prompt_messages[0] is turns[0].prompt_messages[0]


def test_a_sessions_repeated_tools_are_parsed_once_and_a_change_is_read() -> None:
    # The reader keeps a session's last tools and metadata and reuses them for a row holding the
    # same text: equal text is shared, different text parsed (and checked) anew.
    from tito_cli.errors import InvalidSessionError
    from tito_cli.read.columns import RawTurn
    from tito_cli.read.rows import SessionRows
    from tito_cli.read.validate import parse_session
    from tito_cli.turns import RowRef

    def text(value: object) -> np.ndarray:
        return np.frombuffer(json.dumps(value).encode(), dtype=np.uint8)

    def row(seq: int, tools: np.ndarray | str, metadata: str = '{"agent": "main"}') -> RawTurn:
        return RawTurn(
            seq=seq,
            prompt_ids=np.array([1, 2], dtype=np.int32),
            output_ids=np.array([7], dtype=np.int32),
            output_logprobs=None,
            finish_reason="stop",
            prompt_messages=text([{"role": "user", "content": f"q{seq}"}]),
            response_message=None,
            tools=tools,
            metadata=metadata,
            source=RowRef("test", seq),
        )

    bash = [{"type": "function", "function": {"name": "bash"}}]
    read = [{"type": "function", "function": {"name": "read_file"}}]
    # Equal text in separate buffers, then other tools, then the first again as a str cell.
    rows = [row(0, text(bash)), row(1, text(bash)), row(2, text(read)), row(3, json.dumps(bash), '{"agent": "sub"}')]
    turns = parse_session(SessionRows("s", rows))
    assert [t.tools for t in turns] == [bash, bash, read, bash]
    assert turns[1].tools is turns[0].tools
    assert [t.metadata for t in turns] == [{"agent": "main"}] * 3 + [{"agent": "sub"}]
    assert turns[1].metadata is turns[0].metadata

    # A row whose tools differ from the previous row's is still checked.
    rows = [row(0, text(bash)), row(1, text({"name": "bash"}))]
    with pytest.raises(InvalidSessionError, match="tools is not a JSON array") as raised:
        parse_session(SessionRows("s", rows))
    assert raised.value.row == 1
