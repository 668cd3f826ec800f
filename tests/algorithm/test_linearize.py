"""Linearization (SPEC §4): segments, drift rules, dedup, sample emission."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.engine_helpers import msg, turn
from tito_cli.algorithm.linearize import ForkCause, common_prefix_length
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.session import rebuild_session
from tito_cli.turns import SessionInfo

S, U = msg("system", "S"), msg("user", "u")
A0 = msg("assistant", "a0")
T = msg("tool", "t")


def samples(turns, threshold=1024, reward=1.0, mode="split"):  # type: ignore[no-untyped-def]
    policy = SlimeV4(fork_threshold=threshold, reward_mode=mode)
    result = rebuild_session("s", turns, SessionInfo(reward=reward), policy)
    return result


def two_turns(second_prompt: list[int], threshold: int = 1024, logprobs=None):  # type: ignore[no-untyped-def]
    t0 = turn(0, [S, U], [1, 2, 3], [10, 11, 12], response=A0, logprobs=logprobs)
    t1 = turn(1, [S, U, A0, T], second_prompt, [20, 21])
    return samples([t0, t1], threshold)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [([], [1], 0), ([1, 2, 3], [1, 2, 3], 3), ([1, 2, 3], [1, 2], 2), ([1, 2, 3], [1, 9, 3], 1), ([5], [6], 0)],
)
def test_common_prefix_length(a: list[int], b: list[int], expected: int) -> None:
    assert common_prefix_length(np.array(a, np.int32), np.array(b, np.int32)) == expected


def test_clean_continuation_packs_one_sample() -> None:
    result = two_turns([1, 2, 3, 10, 11, 12, 30, 31])
    (s,) = result.samples
    assert s.tokens.tolist() == [1, 2, 3, 10, 11, 12, 30, 31, 20, 21]
    assert s.response_length == 7
    assert s.loss_mask.tolist() == [1, 1, 1, 0, 0, 1, 1]
    assert [d.kind for d in result.linearization.decisions] == ["start", "clean"]
    assert result.report.forks == {c.value: 0 for c in SlimeV4.fork_causes}


def test_short_drift_in_latest_response_is_realigned() -> None:
    # The template re-rendered the last output token (12 -> 13): 1 token of drift.
    result = two_turns([1, 2, 3, 10, 11, 13, 30], threshold=2)
    (s,) = result.samples
    assert s.tokens.tolist() == [1, 2, 3, 10, 11, 13, 30, 20, 21]
    # The surviving output tokens keep their mask; the prompt's version is context.
    assert s.loss_mask.tolist() == [1, 1, 0, 0, 1, 1]
    (realign,) = [d for d in result.linearization.decisions if d.kind == "realign"]
    assert (realign.lcp, realign.drift) == (5, 1)
    assert result.report.realigns == 1


def test_realign_keeps_recorded_logprobs_of_surviving_tokens() -> None:
    result = two_turns([1, 2, 3, 10, 13], threshold=1024, logprobs=[-0.5, -0.25, -0.125])
    (s,) = result.samples
    assert s.loss_mask.tolist() == [1, 0, 1, 1]
    assert s.rollout_log_probs.tolist() == [-0.5, 0.0, 0.0, 0.0]


def test_drift_not_shorter_than_threshold_forks() -> None:
    result = two_turns([1, 2, 3, 10, 13], threshold=2)  # drift 2, threshold 2
    first, second = result.samples
    assert first.tokens.tolist() == [1, 2, 3, 10, 11, 12] and first.fork is None
    assert second.tokens.tolist() == [1, 2, 3, 10, 13, 20, 21]
    assert second.response_length == 2 and second.fork is ForkCause.DRIFT_TOO_LONG
    assert result.report.forks[ForkCause.DRIFT_TOO_LONG.value] == 1


def test_threshold_zero_forks_on_any_drift() -> None:
    result = two_turns([1, 2, 3, 10, 11, 13], threshold=0)
    assert len(result.samples) == 2
    assert result.samples[1].fork is ForkCause.DRIFT_TOO_LONG


def test_drift_in_prompt_region_forks() -> None:
    result = two_turns([1, 9, 3, 10, 11, 12])
    assert [s.fork for s in result.samples] == [None, ForkCause.PROMPT_REGION]
    assert result.report.forks[ForkCause.PROMPT_REGION.value] == 1


def test_drift_before_latest_response_forks() -> None:
    t0 = turn(0, [S, U], [1, 2], [10, 11], response=A0)
    a1 = msg("assistant", "a1")
    t1 = turn(1, [S, U, A0, T], [1, 2, 10, 11, 5], [20, 21], response=a1)
    # Turn 2's prompt drops a token of turn 0's output (stripped reasoning): before turn 1's span.
    t2 = turn(2, [S, U, A0, T, a1, T], [1, 2, 10, 5, 20, 21, 6], [30])
    result = samples([t0, t1, t2])
    assert [s.fork for s in result.samples] == [None, ForkCause.BEFORE_LATEST_RESPONSE]
    first, second = result.samples
    assert first.seqs == [0, 1] and second.seqs == [2]
    assert second.response_length == 1


def test_fork_is_reported_with_its_original_prefix() -> None:
    result = two_turns([1, 2, 3, 10, 13], threshold=2)
    (fork,) = [d for d in result.linearization.decisions if d.kind == "fork"]
    assert (fork.lcp, fork.drift) == (4, 2)


def test_shared_turns_are_trained_once_across_leaves() -> None:
    t0 = turn(0, [S, U], [1, 2], [10], response=A0)
    t1 = turn(1, [S, U, A0, T], [1, 2, 10, 5], [20])
    t2 = turn(2, [S, U, A0, T], [1, 2, 10, 5], [21])  # a retry: sibling leaf
    result = samples([t0, t1, t2])
    first, second = result.samples
    assert first.loss_mask.tolist() == [1, 0, 1]
    # t0 is context in the second leaf; only the retry's output is trained.
    assert second.loss_mask.tolist() == [0, 0, 1]
    assert second.trained_seqs == [2] and second.seqs == [0, 2]
    assert result.report.turns_trained == 3 and result.report.turns_context_only == 0


def test_leaf_with_nothing_new_to_train_is_dropped() -> None:
    t0 = turn(0, [S, U], [1, 2], [10], response=A0)
    t1 = turn(1, [S, U, A0, T], [1, 2, 10, 5], [])  # empty output
    result = samples([t0, t1])
    (s,) = result.samples
    assert s.loss_mask.tolist() == [1, 0]
    # A turn whose only output is empty yields no sample on its own.
    lone = samples([turn(0, [S, U], [1, 2], [])])
    assert lone.samples == [] and lone.linearization.dropped_segments == 1


def test_empty_prompt_ids_are_fine() -> None:
    result = samples([turn(0, [S, U], [], [7, 8])])
    (s,) = result.samples
    assert s.tokens.tolist() == [7, 8] and s.response_length == 2


def test_reward_split_and_full() -> None:
    t0 = turn(0, [S, U], [1], [10])
    t1 = turn(1, [S, U], [1], [11])
    assert samples([t0, t1], reward=3.0).rewards == [1.5, 1.5]
    assert samples([t0, t1], reward=3.0, mode="full").rewards == [3.0, 3.0]


def test_recorded_logprobs_only_on_trained_tokens() -> None:
    t0 = turn(0, [S, U], [1], [10, 11], response=A0, logprobs=[-1.0, -2.0])
    t1 = turn(1, [S, U, A0, T], [1, 10, 11, 5], [20], logprobs=None)
    (s,) = samples([t0, t1]).samples
    assert s.rollout_log_probs.dtype == np.float32
    assert s.rollout_log_probs.tolist() == [-1.0, -2.0, 0.0, 0.0]


def test_a_realign_shared_by_two_leaves_counts_once() -> None:
    t0 = turn(0, [S, U], [1, 2], [10, 11], response=A0)
    t1 = turn(1, [S, U, A0, T], [1, 2, 10, 12, 5], [20])  # realigns t0's last token
    a1 = msg("assistant", "r1")
    t2 = turn(2, [S, U, A0, T, a1, T], [1, 2, 10, 12, 5, 20, 6], [30])
    t3 = turn(3, [S, U, A0, T, a1, T], [1, 2, 10, 12, 5, 20, 6], [31])  # a retry: second leaf
    result = samples([t0, t1, t2, t3])
    assert len(result.samples) == 2
    assert [d.kind for d in result.linearization.decisions].count("realign") == 2  # once per leaf pass
    assert result.report.realigns == 1
