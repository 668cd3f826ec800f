"""``tito rebuild --policy trl`` equals TRL 1.16.0's own ``_chain_to_sequences``, session by session.

The oracle is TRL's code from its pinned wheel (``tests/support/trl_oracle.py``).  Each log is rebuilt
through the real CLI; the turns it was rebuilt from are read back (the reader's validated turns,
in ``seq`` order: TRL's call order) and handed to TRL; every session's rows must then agree in
number and order, tokens, loss mask over the whole row, logprobs (float32, what the samples file
holds; context zero-filled in both) and reward (TRL stamps a conversation's whole reward on every
row it produced).  Logs: fresh simulations of every family with a tokenizer here (Qwen3 from two
seeds, DeepSeek-V3, gpt-oss, Llama 3), the demo logs and both conformance corpora, at thresholds
1024 (TRL's default) and 64; the run as a whole must have realigned, forked and dropped an
empty row, so that each path of the reconciler was compared.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.family_logs import TOKENIZERS, tokenizer_folder
from tests.support.helpers import CONFORMANCE, CONFORMANCE_SLIME03, REPO, conformance_folders, read_jsonl, write_log
from tests.support.trl_oracle import chain_to_sequences
from tito_cli.algorithm.policy import Policy
from tito_cli.algorithm.session import rebuild_session
from tito_cli.errors import EXIT_OK, EXIT_REJECTED
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.report.drift import FIRST_MESSAGE_DIFFERS, REPLY_NOT_REPLAYED, divergences
from tito_cli.simulate import simulate
from tito_cli.tokenizer import TokenText

THRESHOLDS = (1024, 64)
SESSIONS = 10
#: (family, seed): Qwen3 (the shipped tokenizer) from two seeds, the other families from one.
LOGS = [("qwen3", 0), ("qwen3", 11), ("deepseek-v3", 4), ("gpt-oss", 4), ("llama3", 4)]


@pytest.fixture(scope="module", params=LOGS, ids=[f"{f}-{s}" for f, s in LOGS])
def simulated(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    family, seed = request.param
    out = tmp_path_factory.mktemp(f"{family}-{seed}") / "logs"
    if family == "qwen3":
        simulate(out, SESSIONS, seed, "qwen3")
    else:
        folder = tokenizer_folder(family)
        simulate(out, SESSIONS, seed, family, tokenizer=TOKENIZERS[family].hub_name, tokenizer_dir=folder)
    return out


def rebuild_trl(logs: Path, out: Path, threshold: int) -> dict[str, list[dict[str, Any]]]:
    """``tito rebuild --policy trl``'s samples, by session, in file order (the corpora hold sessions it rejects)."""
    args = ["rebuild", str(logs), "--out", str(out), "--policy", "trl", "--fork-threshold", str(threshold)]
    result = tito(*args)
    assert result.exit_code in (EXIT_OK, EXIT_REJECTED), result.output
    by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in pq.read_table(out).to_pylist():
        by_session[row["session_id"]].append(row)
    return by_session


def assert_equals_trl(logs: Path, out: Path, threshold: int) -> Counter[str]:
    """Every session's rows against TRL's; returns how many sessions were compared and what TRL did."""
    got = rebuild_trl(logs, out, threshold)
    log = TurnLog.open([logs], index=True)
    sessions = log.read_sessions()
    seen: Counter[str] = Counter()
    for rows in log.iter_sessions():
        sid = rows.session_id
        try:
            turns = parse_session(rows, key=Policy.named("trl").message_key)
        except Exception:  # rejected by the reader: the rebuild reports it, TRL never sees it
            assert sid not in got, sid
            continue
        calls = [
            (
                t.prompt_ids.tolist(),
                t.output_ids.tolist(),
                # A turn without logprobs is read as zeros (TRL's TurnRecord would refuse it).
                t.output_logprobs.tolist() if t.output_logprobs is not None else [0.0] * len(t.output_ids),
            )
            for t in turns
        ]
        expected, tally = chain_to_sequences(calls, threshold)
        seen["realign"] += int(tally["realign"])
        seen["fork"] += int(tally["fork"])
        seen["empty rows dropped"] += (int(tally["fork"]) + 1 if calls else 0) - len(expected)
        mine = got.get(sid, [])
        assert len(mine) == len(expected), f"{sid}: {len(mine)} rows, TRL {len(expected)}"
        info = sessions.infos.get(sid)
        reward = info.reward if info is not None else 0.0
        for index, (row, trl) in enumerate(zip(mine, expected, strict=True)):
            where = f"{sid} row {index} (threshold {threshold})"
            assert row["sample_index"] == index, where
            assert row["tokens"] == trl.input_ids, where
            context = len(row["tokens"]) - row["response_length"]
            assert [0] * context + row["loss_mask"] == trl.completion_mask, where
            trl_logprobs = np.asarray(trl.old_log_probs, dtype=np.float32)
            assert np.array_equal(np.asarray(row["rollout_log_probs"], dtype=np.float32), trl_logprobs[context:]), where
            assert not trl_logprobs[:context].any(), where
            assert row["reward"] == reward, where
            assert json.loads(row["metadata"])["tito"]["leaf"] == 0, where
        seen["sessions"] += 1
    return seen


@pytest.mark.slow  # every family's simulated logs against TRL's code
@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_simulated_logs_equal_trl(simulated: Path, threshold: int, tmp_path: Path) -> None:
    seen = assert_equals_trl(simulated, tmp_path / "samples.parquet", threshold)
    assert seen["sessions"] == SESSIONS and seen["fork"] > 0, seen


@pytest.mark.parametrize("threshold", THRESHOLDS)
def test_demo_logs_equal_trl(threshold: int, tmp_path: Path) -> None:
    seen = assert_equals_trl(REPO / "fixtures" / "logs", tmp_path / "samples.parquet", threshold)
    assert seen["sessions"] == 32 and seen["realign"] > 0 and seen["fork"] > 0, seen


@pytest.mark.slow
@pytest.mark.parametrize(
    "folder",
    conformance_folders(CONFORMANCE) + conformance_folders(CONFORMANCE_SLIME03),
    ids=lambda f: f"{f.parent.name}/{f.name}",
)
def test_conformance_corpora_equal_trl(folder: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    for threshold in THRESHOLDS:
        assert_equals_trl(logs, tmp_path / f"samples-{threshold}.parquet", threshold)


def test_conformance_cases_realign_fork_and_drop_empty_rows(tmp_path: Path) -> None:
    """The hand-made cases take every path of TRL's reconciler, each compared above."""
    folder = CONFORMANCE / "cases-threshold-1024"
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    seen = assert_equals_trl(logs, tmp_path / "samples.parquet", 1024)
    assert seen["realign"] > 0 and seen["fork"] > 0 and seen["empty rows dropped"] > 0, seen


def test_drift_names_what_the_routing_tree_keeps_apart() -> None:
    """``inspect --drift`` explains TRL's forks and realigns: a sub-agent's call is ``first message differs``,
    a resent prompt ``reply not replayed``; slime-v4's routing tree never meets the second, and the first
    only where a tool list changed (the system prompts part at token 51, never at the sub-agent's 6)."""
    text = TokenText.open(str(REPO / "fixtures" / "tokenizers" / "qwen3"))
    log = TurnLog.open([REPO / "fixtures" / "logs"], index=True)
    infos = log.read_sessions().infos
    classes: dict[str, Counter[Any]] = {"trl": Counter(), "slime-v4": Counter()}
    first_parted: dict[str, Counter[int]] = {"trl": Counter(), "slime-v4": Counter()}
    for rows in log.iter_sessions():
        for name, counter in classes.items():
            policy = Policy.named(name)
            turns = parse_session(rows, policy.message_key)
            result = rebuild_session(rows.session_id, turns, infos.get(rows.session_id), policy)
            if rows.session_id == "qwen3-0-0010":
                counter.update((d.seq, d.drift_class) for d in divergences(result, text))
            found = divergences(result, text)
            counter.update(d.drift_class for d in found)
            first_parted[name].update(d.index for d in found if d.drift_class == FIRST_MESSAGE_DIFFERS)
    assert classes["trl"][(4, FIRST_MESSAGE_DIFFERS)] == 1 and classes["trl"][(6, FIRST_MESSAGE_DIFFERS)] == 1
    assert classes["trl"][FIRST_MESSAGE_DIFFERS] > 0 and classes["trl"][REPLY_NOT_REPLAYED] > 0, classes["trl"]
    assert classes["slime-v4"][REPLY_NOT_REPLAYED] == 0, classes
    assert classes["slime-v4"][FIRST_MESSAGE_DIFFERS] == 6 and set(first_parted["slime-v4"]) == {51}, first_parted
    assert 6 in first_parted["trl"], first_parted
