"""The policy seam: a policy is one module behind one interface, and everything that rebuilds takes it.

The acceptance test of the seam (issue #15): a trivial variant defined here,
and nowhere else, is a named policy that the library, worker processes, the
command line, the dumps and the samples file all use.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.scenario_logs import scenario_log
from tito_cli.algorithm.policies import Slime03, SlimeV4
from tito_cli.algorithm.policy import POLICIES, ForkCause, Policy, policy_names, register_policy
from tito_cli.algorithm.session import SessionResult
from tito_cli.cli import app
from tito_cli.run.corpus import Corpus
from tito_cli.run.rebuild import rebuild
from tito_cli.turns import Turn


@pytest.fixture(scope="module")
def agent_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_log("agent", tmp_path_factory.mktemp("agent") / "logs")


@dataclass(frozen=True)
class NeverRealign(SlimeV4):
    """slime-v4, except that a drift inside the latest response always forks."""

    name: ClassVar[str] = "test-never-realign"
    summary: ClassVar[str] = "slime-v4 that forks instead of realigning (a test's variant)"

    def fork_cause(
        self, lcp: int, drift: int, first_prompt_length: int, last_span_start: int | None, turn: Turn
    ) -> ForkCause | None:
        cause = super().fork_cause(lcp, drift, first_prompt_length, last_span_start, turn)
        return ForkCause.DRIFT_TOO_LONG if cause is None and drift else cause


@pytest.fixture(autouse=True, scope="module")
def _registered() -> Iterator[None]:
    # One line makes it a named policy (the plug-in convention); taken out again after this module.
    register_policy(NeverRealign)
    yield
    POLICIES.unregister(NeverRealign.name)


def test_a_variant_in_its_own_module_is_a_named_policy() -> None:
    assert "test-never-realign" in policy_names()
    assert policy_names()[:1] == ["slime-v4"]
    policy = Policy.named("test-never-realign", fork_threshold=7)
    assert isinstance(policy, NeverRealign)
    assert policy.describe() == {
        "name": "test-never-realign",
        "fork_threshold": 7,
        "reward_mode": "split",
        "max_sample_tokens": None,
    }
    assert pickle.loads(pickle.dumps(policy)) == policy  # what workers and Ray receive
    with pytest.raises(ValueError, match="unknown policy 'nope'; choose from slime-v4"):
        Policy.named("nope")


def test_the_variant_changes_the_samples_everywhere_it_is_named(agent_logs: Path, tmp_path: Path) -> None:
    corpus = Corpus.open([agent_logs])
    default = {r.session_id: r for r in corpus.results(SlimeV4()) if isinstance(r, SessionResult)}
    variant = {r.session_id: r for r in corpus.results(NeverRealign()) if isinstance(r, SessionResult)}
    realigned = [sid for sid, r in default.items() if r.report.realigns]
    assert realigned, "the agent log has a realign for the variant to change"
    for sid in default:
        assert variant[sid].report.realigns == 0
        if sid in realigned:
            assert variant[sid].report.samples > default[sid].report.samples

    # The command line takes it by name, in-process and with worker processes alike.
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"samples-{workers}.parquet"
        args = ["rebuild", str(agent_logs), "--out", str(out), "--policy", "test-never-realign", "-j", workers]
        result = tito(*args, "--batch-mb", "0.000001")
        assert result.exit_code == 3, result.output  # the agent log has one rejected session
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    written = pq.read_table(tmp_path / "samples-1.parquet")
    assert written.num_rows == sum(r.report.samples for r in variant.values())
    assert json.loads(pq.read_schema(tmp_path / "samples-1.parquet").metadata[b"tito.policy"])["name"] == (
        "test-never-realign"
    )
    summary = rebuild([agent_logs], tmp_path / "lib.parquet", NeverRealign(), workers=1)
    assert summary.totals.realigns == 0

    dumped = tito("dump", str(agent_logs), "--out", "-", "--policy", "test-never-realign")
    assert dumped.exit_code == 0, dumped.output
    assert "policy: test-never-realign, fork threshold 1024, reward split" in dumped.stdout


def test_every_rebuilding_command_takes_the_policy_options() -> None:
    import typer.main

    commands = typer.main.get_command(app).commands  # type: ignore[attr-defined]
    for name in ("rebuild", "inspect", "ls", "stats", "dump", "check"):
        options = {opt for param in commands[name].params for opt in param.opts}
        assert {"--policy", "--fork-threshold", "--reward-mode", "--max-sample-tokens"} <= options, name
    result = tito("ls", "--policy", "nope")
    assert result.exit_code == 2
    assert "unknown policy 'nope'" in result.output


def test_the_policy_reward_default_applies_unless_given() -> None:
    assert Slime03().rewards(1.0, 4) == [1.0] * 4
    assert Slime03(reward_mode="split").rewards(1.0, 4) == [0.25] * 4
    assert SlimeV4().rewards(1.0, 4) == [0.25] * 4
    assert SlimeV4(reward_mode="full").describe()["reward_mode"] == "full"
