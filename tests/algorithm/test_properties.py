"""Property tests: random sessions through the reader and the engine.

The generator grows a session the way agent harnesses do: new conversations
(same or different system prompts), extensions by user/tool messages,
resent prompts, forks cut at a message of any role, short and long
assistant rewrites, re-tokenization drift at random positions, empty
prompts, empty outputs, missing response messages, and logprobs that are
recorded, empty or absent.  Small alphabets make equal messages and equal
token runs common, so branches share routing and drift is often "short".

Every generated session must rebuild without error, equal the literal SPEC
model (``tests/support/spec_model.py``), and satisfy the invariants a trainer relies
on.  Budget: ``HYPOTHESIS_PROFILE=ci`` (500 examples each) in CI.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.helpers import write_log
from tests.support.session_strategy import (
    sessions,
)
from tests.support.spec_model import ModelSample, model_rebuild, model_rebuild_slime03
from tito_cli.algorithm.policies import Slime03, SlimeV4
from tito_cli.algorithm.policies.slime_03 import value_key
from tito_cli.algorithm.policy import ForkCause
from tito_cli.algorithm.session import SessionResult, rebuild_session
from tito_cli.export.samples import provenance
from tito_cli.read.columns import RawTurn
from tito_cli.read.rows import SessionRows
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild
from tito_cli.turns import MessageKey, RowRef, SessionInfo, Turn, canonical_json, message_key


def parse(session: dict[str, Any], sid: str = "s", key: Callable[[Any], MessageKey] = message_key) -> list[Turn]:
    """The rows through the reader's validation (messages keyed by ``key``), as ``rebuild`` would see them."""

    def ids(values: list[int]) -> np.ndarray:
        return np.asarray(values, dtype=np.int64)

    raw = [
        RawTurn(
            seq=r["seq"],
            prompt_ids=ids(r["prompt_ids"]),
            output_ids=ids(r["output_ids"]),
            output_logprobs=None if r["output_logprobs"] is None else np.asarray(r["output_logprobs"], np.float64),
            finish_reason=r["finish_reason"],
            prompt_messages=np.frombuffer(json.dumps(r["prompt_messages"]).encode(), dtype=np.uint8),
            response_message=None if r["response_message"] is None else json.dumps(r["response_message"]),
            tools=None,
            metadata=None,
            source=RowRef("generated", i),
            ill_formed=r["ill_formed"],
        )
        for i, r in enumerate(session["rows"])
    ]
    return parse_session(SessionRows(sid, raw), key)


def run(session: dict[str, Any]) -> SessionResult:
    policy = SlimeV4(fork_threshold=session["threshold"], reward_mode=session["reward_mode"])
    return rebuild_session("s", parse(session), SessionInfo(reward=session["reward"]), policy)


@given(sessions())
def test_engine_equals_the_literal_spec_model(session: dict[str, Any]) -> None:
    result = run(session)
    model = model_rebuild(parse(session), session["threshold"], session["reward"], session["reward_mode"])
    assert_samples_equal(result, model)


def assert_samples_equal(result: SessionResult, model: Sequence[ModelSample]) -> None:
    """The engine's samples and rewards are the model's, field by field, in the same order."""
    assert len(result.samples) == len(model)
    for sample, reward, want in zip(result.samples, result.rewards, model, strict=True):
        assert sample.tokens.tolist() == want.tokens
        assert sample.response_length == want.response_length
        assert sample.loss_mask.tolist() == want.loss_mask
        assert sample.rollout_log_probs.tolist() == np.asarray(want.rollout_log_probs, np.float32).tolist()
        assert reward == want.reward


@given(sessions())
def test_every_sample_is_trainable_and_traceable(session: dict[str, Any]) -> None:
    result = run(session)
    turns = {t.seq: t for t in result.tree.turns}
    trained_anywhere: list[int] = []
    for sample in result.samples:
        n = sample.response_length
        assert len(sample.loss_mask) == len(sample.rollout_log_probs) == n <= len(sample.tokens)
        assert sample.loss_mask.sum() >= 1, "a sample must train at least one token"
        offset = len(sample.tokens) - n
        prov = provenance(sample)
        assert prov["turns"] == sorted(prov["turns"]) and set(prov["trained_turns"]) <= set(prov["turns"])

        # Every loss-1 token lies in exactly one trained span, and every span is the
        # output of a turn that provenance lists as trained, at that turn's offset.
        covered = np.zeros(len(sample.tokens), dtype=np.int8)
        for span in sample.spans:
            if not span.trained or span.end <= span.start:
                continue
            turn = span.turn
            assert turn.seq in prov["trained_turns"]
            assert span.start == len(turn.prompt_ids), "a turn's output follows its own prompt"
            length = span.end - span.start
            assert sample.tokens[span.start : span.end].tolist() == turn.output_ids[:length].tolist()
            recorded = turn.output_logprobs
            got = sample.rollout_log_probs[span.start - offset : span.end - offset]
            want = np.zeros(length, np.float32) if recorded is None else recorded[:length]
            assert got.tolist() == want.tolist()
            covered[span.start : span.end] += 1
        assert covered.max(initial=0) <= 1
        assert covered[offset:].tolist() == sample.loss_mask.tolist()
        assert not covered[:offset].any(), "nothing in the first prompt is trained"
        trained_anywhere += prov["trained_turns"]
        assert all(seq in turns for seq in prov["turns"]), "skipped turns are never packed"

    assert len(trained_anywhere) == len(set(trained_anywhere)), "no turn is trained in two samples"
    if session["reward_mode"] == "split" and result.samples:
        assert math.isclose(sum(result.rewards), session["reward"], rel_tol=1e-9, abs_tol=1e-9)
    if session["reward_mode"] == "full":
        assert all(r == session["reward"] for r in result.rewards)


@given(sessions())
def test_rebuilding_twice_gives_the_same_samples(session: dict[str, Any]) -> None:
    first, second = run(session), run(session)
    assert first.report == second.report
    assert len(first.samples) == len(second.samples)
    for a, b in zip(first.samples, second.samples, strict=True):
        assert a.tokens.tobytes() == b.tokens.tobytes()
        assert a.loss_mask.tobytes() == b.loss_mask.tobytes()
        assert a.rollout_log_probs.tobytes() == b.rollout_log_probs.tobytes()
        assert provenance(a) == provenance(b)


@settings(max_examples=max(10, settings.default.max_examples // 10))
@given(st.lists(sessions(), min_size=1, max_size=4))
def test_samples_file_is_byte_identical_across_rebuilds(batch: list[dict[str, Any]]) -> None:
    """Through Parquet end to end: capture writer, reader, rebuild, samples file."""
    turns, sessions_rows = [], []
    for i, session in enumerate(batch):
        sid = f"s{i}"
        for r in session["rows"]:
            turns.append({**r, "session_id": sid})
        sessions_rows.append({"session_id": sid, "reward": session["reward"]})
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_log(root / "logs", turns, sessions_rows, max_rows=5)
        policy = SlimeV4(fork_threshold=batch[0]["threshold"], reward_mode=batch[0]["reward_mode"])
        summary = rebuild([root / "logs"], root / "a.parquet", policy)
        rebuild([root / "logs"], root / "b.parquet", policy)
        assert not summary.rejected
        assert (root / "a.parquet").read_bytes() == (root / "b.parquet").read_bytes()
        rows = pq.read_table(root / "a.parquet").to_pylist()
    # And the file holds, session by session, what the engine gives that session on its own.
    want = []
    for i, session in enumerate(batch):
        alone = run({**session, "threshold": policy.fork_threshold, "reward_mode": policy.reward_mode})
        want += [
            (f"s{i}", s.tokens.tolist(), s.loss_mask.tolist(), r)
            for s, r in zip(alone.samples, alone.rewards, strict=True)
        ]
    assert [(r["session_id"], r["tokens"], r["loss_mask"], r["reward"]) for r in rows] == want


# -- slime-0.3 (SPEC §8) -------------------------------------------------------------------


def run_slime03(session: dict[str, Any], reward_mode: str | None = None) -> SessionResult:
    policy = Slime03(
        fork_threshold=session["threshold"], reward_mode=reward_mode, max_sample_tokens=session["max_sample_tokens"]
    )
    turns = parse(session, key=policy.message_key)
    return rebuild_session("s", turns, SessionInfo(reward=session["reward"]), policy)


@given(sessions(), st.sampled_from([None, "split", "full"]))
def test_slime03_engine_equals_the_literal_section_8_model(session: dict[str, Any], reward_mode: str | None) -> None:
    result = run_slime03(session, reward_mode)
    model, left_out = model_rebuild_slime03(
        parse(session), session["threshold"], session["reward"], reward_mode, session["max_sample_tokens"]
    )
    assert result.report.left_out_samples == left_out
    assert_samples_equal(result, model)
    assert [sample.flags for sample in result.samples] == [want.flags for want in model]


def _identities_agree(turns: list[Turn]) -> bool:
    """True when, on these turns' messages, equal by value (§8.1) means equal canonical JSON (§3)."""
    texts: dict[Any, set[str]] = {}
    for turn in turns:
        for m in [*turn.prompt_messages, turn.response_message]:
            if m is not None:
                texts.setdefault(value_key(m), set()).add(canonical_json(m))
    return all(len(t) == 1 for t in texts.values())


_GATED = {"realign", ForkCause.DRIFT_TOO_LONG, ForkCause.OUTPUT_TOO_LONG}


def _drift_in_latest_response(result: SessionResult) -> bool:
    """Some turn's prompt drifted inside the latest response held: the case whose gate and cut differ."""
    return any(d.kind in _GATED or d.cause in _GATED for d in result.linearization.decisions)


@given(sessions())
def test_the_two_policies_agree_without_drift_rewrites_or_value_identity(session: dict[str, Any]) -> None:
    """The invariant: on the same turns, with the same threshold and max_sample_tokens, slime-v4 with
    reward mode R and slime-0.3 with reward mode R give identical samples (tokens, response lengths,
    loss masks, logprobs, rewards) whenever
      * message identity agrees on the session's messages (no two are equal by value, §8.1, but not
        as canonical JSON, §3),
      * neither policy absorbed a rewrite (§3 step 4 / §8.2 merged nothing), and
      * neither met a drift inside the latest response (no realign, no drift_too_long fork in
        slime-v4, no output_too_long fork in slime-0.3: the only decisions whose gate or cut differ).
    Forks in the prompt region or before the latest response are allowed: both policies decide those
    alike.  The flags are slime-0.3's alone and are not compared.
    """
    mode = session["reward_mode"]
    v4_policy = SlimeV4(
        fork_threshold=session["threshold"], reward_mode=mode, max_sample_tokens=session["max_sample_tokens"]
    )
    v4 = rebuild_session("s", parse(session), SessionInfo(reward=session["reward"]), v4_policy)
    s03 = run_slime03(session, mode)
    if (
        not _identities_agree(v4.tree.turns)
        or v4.tree.merges
        or s03.tree.merges
        or _drift_in_latest_response(v4)
        or _drift_in_latest_response(s03)
    ):
        return
    assert len(v4.samples) == len(s03.samples)
    for a, b in zip(v4.samples, s03.samples, strict=True):
        assert a.tokens.tolist() == b.tokens.tolist()
        assert a.response_length == b.response_length
        assert a.loss_mask.tolist() == b.loss_mask.tolist()
        assert a.rollout_log_probs.tolist() == b.rollout_log_probs.tolist()
    assert v4.rewards == s03.rewards
    assert v4.report.left_out_samples == s03.report.left_out_samples
