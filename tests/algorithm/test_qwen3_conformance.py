"""Conformance-style: the qwen3 profile's sessions, rebuilt by the engine and by a literal model of SPEC §3–§4.

The simulator renders every prompt with the real Qwen3 chat template and
tokenizer, so its drift (reasoning the template drops, non-canonical splits,
tool-call JSON the server re-renders) is the kind real logs have.  The engine
(indexed routing, segments that never copy tokens) and ``tests/support/spec_model.py``
(plain lists, each line a sentence of the spec) must give the same samples
for every session, at the default threshold and at the edges.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.support.helpers import REPO
from tests.support.spec_model import model_rebuild
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.session import rebuild_session
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.simulate import simulate
from tito_cli.turns import SessionInfo, Turn

DEMO_LOGS = REPO / "fixtures" / "logs"


@pytest.fixture(scope="module")
def fresh_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sessions the demo logs do not have: another seed."""
    out = tmp_path_factory.mktemp("qwen3") / "logs"
    simulate(out, sessions=12, seed=7, profile="qwen3")
    return out


def sessions(folder: Path) -> list[tuple[str, list[Turn], SessionInfo]]:
    log = TurnLog.open([folder], index=True)
    infos = log.read_sessions().infos
    found = []
    for rows in log.iter_sessions():
        sid = rows.session_id
        found.append((sid, parse_session(rows), infos.get(sid, SessionInfo(finished=False))))
    return found


@pytest.mark.slow
@pytest.mark.parametrize("threshold", [0, 1, 64, 1024])
@pytest.mark.parametrize("logs", ["demo", "fresh"])
def test_engine_equals_the_literal_spec_model_on_qwen3_sessions(
    logs: str, threshold: int, fresh_logs: Path
) -> None:
    folder = DEMO_LOGS if logs == "demo" else fresh_logs
    seen: Counter[str] = Counter()
    for sid, turns, info in sessions(folder):
        result = rebuild_session(sid, turns, info, SlimeV4(fork_threshold=threshold))
        model = model_rebuild(turns, threshold, info.reward, "split")
        assert len(result.samples) == len(model), sid
        for sample, reward, want in zip(result.samples, result.rewards, model, strict=True):
            assert sample.tokens.tolist() == want.tokens, sid
            assert sample.response_length == want.response_length, sid
            assert sample.loss_mask.tolist() == want.loss_mask, sid
            assert sample.rollout_log_probs.tolist() == np.asarray(want.rollout_log_probs, np.float32).tolist(), sid
            assert reward == want.reward, sid
        seen.update(d.kind for d in result.linearization.decisions)
        seen.update(f"fork:{c}" for c, n in result.report.forks.items() if n)
    # The comparison covers what real drift does, not only clean continuations.
    assert seen["clean"] and seen["fork"]
    if threshold > 1:
        assert seen["realign"]
    if threshold == 1024:
        assert seen["fork:prompt_region"] and seen["fork:before_latest_response"]
