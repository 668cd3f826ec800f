"""The session simulator and the demo logs it made (fixtures/logs)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import REPO
from tito_cli.algorithm.session import SessionResult
from tito_cli.algorithm.tree import Node
from tito_cli.capture.writer import TurnLogWriter
from tito_cli.cli.simulate import ProfileChoice
from tito_cli.errors import EXIT_OK, EXIT_OUTPUT, EXIT_USAGE
from tito_cli.run.corpus import Corpus
from tito_cli.simulate import PROFILES, Features, SimulationSummary, simulate, simulate_session
from tito_cli.simulate.chat import Chat
from tito_cli.simulate.environment import Workspace
from tito_cli.simulate.model import Action, Model, output_text
from tito_cli.simulate.profiles import FEATURES, assign_features
from tito_cli.simulate.session import CONTINUATION

LOGS = REPO / "fixtures" / "logs"
TOKENIZER = REPO / "fixtures" / "tokenizer"
#: The command that made fixtures/logs (also in fixtures/logs/README.md).
DEMO_ARGS = ["--sessions", "32", "--seed", "0", "--profile", "qwen3"]
THRESHOLD = 1024
PLAIN = Features(frozenset())


@pytest.fixture(scope="module")
def chat(offline: None) -> Chat:
    return Chat(TOKENIZER)


@pytest.fixture(scope="module")
def demo() -> list[SessionResult]:
    results = list(Corpus.open([LOGS]).results())
    assert all(isinstance(r, SessionResult) for r in results)
    return results  # type: ignore[return-value]


def simulate_plain(chat: Chat, out: Path, profile: str, seeds: range) -> list[Any]:
    """Sessions with no feature at all: nothing but the task and its tool calls."""
    with TurnLogWriter(out, tokenizer=str(TOKENIZER), max_age=None, name="plain") as writer:
        stats = [
            simulate_session(chat, writer, profile=PROFILES[profile], seed=seed, index=0, features=PLAIN)
            for seed in seeds
        ]
    chat.forget()
    return stats


def rebuild(folder: Path) -> list[SessionResult]:
    results = list(Corpus.open([folder]).results())
    assert all(isinstance(r, SessionResult) for r in results)
    return results  # type: ignore[return-value]


# -- the demo logs -------------------------------------------------------------------


@pytest.mark.slow  # simulates every demo log again
def test_demo_logs_are_reproduced_byte_for_byte(tmp_path: Path) -> None:
    """The committed logs are exactly what the documented command writes, whatever the hash seed."""
    out = tmp_path / "logs"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONHASHSEED": "12345"}
    subprocess.run(
        [sys.executable, "-m", "tito_cli", "simulate", "--out", str(out), *DEMO_ARGS],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
    )
    committed = sorted(p.name for p in LOGS.glob("*.parquet"))
    assert sorted(p.name for p in out.glob("*.parquet")) == committed
    for name in committed:
        assert (out / name).read_bytes() == (LOGS / name).read_bytes(), (
            f"fixtures/logs/{name} is stale: regenerate with "
            f"`tito simulate --out fixtures/logs {' '.join(DEMO_ARGS)} --overwrite`"
        )


def test_demo_logs_record_the_tokenizer_and_stay_small() -> None:
    turns = [p for p in LOGS.glob("*.parquet") if pq.read_schema(p).metadata[b"tito.table"] == b"turns"]
    assert turns
    for path in turns:
        assert pq.read_schema(path).metadata[b"tito.tokenizer"] == b"fixtures/tokenizers/qwen3"
    assert sum(p.stat().st_size for p in LOGS.glob("*.parquet")) < 4 << 20


def _generated_siblings(node: Node) -> int:
    return sum(1 for c in node.children if c.generated)


def test_demo_logs_hold_every_pattern(demo: list[SessionResult]) -> None:
    forks: Counter[str] = Counter()
    realigns = merges = 0
    found: Counter[str] = Counter()
    finish: Counter[str] = Counter()
    for result in demo:
        report, tree = result.report, result.tree
        forks.update(report.forks)
        realigns += report.realigns
        merges += report.rewrite_merges
        nodes = list(tree.root.walk())
        # Sub-agents: several conversations with different system prompts under the root.
        systems = {json.dumps(c.message) for c in tree.root.children if c.role == "system"}
        found["subagent"] += len(systems) > 1
        # Compaction: a second user branch under a system message that continues from a summary.
        for system in tree.root.children:
            users = [c for c in system.children if c.role == "user"]
            if len(users) > 1 and any(
                str(u.message["content"]).startswith(CONTINUATION[:40]) for u in users if u.message
            ):
                found["compaction"] += 1
        # Resends: one prompt with several generated replies.
        found["resend"] += any(_generated_siblings(n) > 1 for n in nodes)
        # Rewrites on both sides of the threshold: short ones merged, long ones left as an echo.
        for node in tree.merges:
            assert node.merged_rewrite is not None
            assert node.merged_rewrite.abandoned_response_tokens < THRESHOLD
        for node in nodes:
            if node.role == "assistant" and not node.generated and node.merged_rewrite is None and node.parent:
                replaced = [c for c in node.parent.children if c.generated and len(c.turn.output_ids) >= THRESHOLD]  # type: ignore[union-attr]
                found["long_rewrite_echo"] += bool(replaced)
        for turn in tree.turns:
            finish[turn.finish_reason] += 1
            found["empty_output"] += len(turn.output_ids) == 0
            response = turn.response_message or {}
            found["parallel_calls"] += len(response.get("tool_calls") or []) > 1
            found["reasoning"] += bool(response.get("reasoning_content"))
        found["no_sessions_row"] += report.missing_sessions_row
        for decision in result.linearization.decisions:
            if decision.kind == "realign":
                assert 0 < decision.drift < THRESHOLD
            if decision.cause is not None and decision.cause.value == "drift_too_long":
                assert decision.drift >= THRESHOLD
    assert all(forks[cause] > 0 for cause in ("prompt_region", "before_latest_response", "drift_too_long")), forks
    assert realigns > 0 and merges > 0
    for name in (
        "subagent",
        "compaction",
        "resend",
        "long_rewrite_echo",
        "empty_output",
        "parallel_calls",
        "reasoning",
        "no_sessions_row",
    ):
        assert found[name] > 0, name
    assert finish["length"] > 0 and finish["abort"] > 0 and finish["tool_calls"] > 0 and finish["stop"] > 0


def test_rebuild_cli_reports_the_events(tmp_path: Path) -> None:
    result = tito("rebuild", str(LOGS), "--out", str(tmp_path / "samples.parquet"))
    assert result.exit_code == EXIT_OK, result.stderr
    lines = {" ".join(line.split()[:-1]): line.split()[-1] for line in result.stderr.splitlines() if line.strip()}
    assert int(lines["sessions rebuilt"]) == 32
    for label in ("in the prompt region", "before the latest response", "drift too long", "realigns", "rewrite merges"):
        assert int(lines[label].replace(",", "")) > 0, label
    assert int(lines["sessions without a sessions row"]) > 0


def test_recorded_prompts_are_the_canonical_tokenization(offline: None) -> None:
    """Incremental (per message block) tokenization gives exactly the ids of the whole text."""
    chat = Chat(REPO / "fixtures" / "tokenizers" / "qwen3")
    table = pq.read_table(next(LOGS.glob("turns-*.parquet")), columns=["session_id", "prompt_ids"])
    sessions = table.column("session_id").to_pylist()
    prompts = table.column("prompt_ids").to_pylist()
    checked = 0
    for sid, ids in zip(sessions, prompts, strict=True):
        if sid in ("qwen3-0-0000", "qwen3-0-0004", "qwen3-0-0015"):
            assert chat.encode(chat.decode(ids)) == ids
            checked += 1
    assert checked > 20


# -- sessions without features -----------------------------------------------------


def test_plain_demo_sessions_rebuild_without_drift(chat: Chat, tmp_path: Path) -> None:
    """A clean reply re-renders to the ids the model produced: one leaf, one sample, all trained."""
    stats = simulate_plain(chat, tmp_path, "demo", range(4))
    assert all(s.turns >= 6 for s in stats)
    for result in rebuild(tmp_path):
        report = result.report
        assert (report.leaves, report.samples, report.fork_total, report.realigns) == (1, 1, 0, 0)
        assert report.turns_trained == report.turns


def test_swe_session_is_long_and_clean(chat: Chat, tmp_path: Path) -> None:
    (stats,) = simulate_plain(chat, tmp_path, "swe", range(1))
    assert 30 <= stats.turns <= 60
    assert stats.max_prompt_tokens > 64_000
    (result,) = rebuild(tmp_path)
    assert (result.report.samples, result.report.fork_total, result.report.realigns) == (1, 0, 0)


# -- pieces ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action",
    [
        Action("Let me look.", [("bash", {"command": "ls"}), ("read_file", {"path": "a.py"})], "I should list files."),
        Action("", [("grep", {"pattern": "x", "path": "src"})]),
        Action("Trailing newline.\n", [("bash", {"command": "pwd"})]),
        Action("All done.\n\n- one\n- two"),
    ],
)
def test_parsed_reply_re_renders_to_the_output_text(chat: Chat, action: Action) -> None:
    text = output_text(action)
    ids = iter(range(100))
    message = chat.parse(text, lambda: f"call_{next(ids)}")
    assert message.get("reasoning_content") == action.reasoning
    calls = message.get("tool_calls") or []
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == action.calls
    rendered = chat.tokenizer.apply_chat_template([{"role": "user", "content": "go"}, message], tokenize=False)
    assert rendered.endswith("<|im_start|>assistant\n" + text + "\n")


def test_truncated_tool_call_stays_in_the_content(chat: Chat) -> None:
    text = output_text(Action("Writing it.", [("write_file", {"path": "a.py", "content": "x = 1\n" * 50})]))
    cut = text[: len(text) // 2]
    message = chat.parse(cut, lambda: "call_0")
    assert "tool_calls" not in message and message["content"] == cut


def test_noncanonical_ids_spell_the_same_text(chat: Chat) -> None:
    action = Action("Let me read the configuration files before changing anything.", [("bash", {"command": "ls -la"})])
    canonical = chat.encode(output_text(action))
    generation = Model(chat, random.Random(3)).generate(action, max_tokens=4096, noncanonical=1.0)
    assert generation.noncanonical_at is not None
    assert len(generation.ids) > len(canonical)
    assert chat.decode(generation.ids) == chat.decode(canonical)
    assert chat.encode(chat.decode(generation.ids)) == canonical
    assert generation.logprobs.dtype == np.float32 and (generation.logprobs <= 0).all()


def test_length_and_abort(chat: Chat) -> None:
    action = Action("A long reply. " * 40)
    model = Model(chat, random.Random(0))
    cut = model.generate(action, max_tokens=10)
    assert (cut.finish_reason, len(cut.ids)) == ("length", 10)
    aborted = model.generate(action, max_tokens=4096, abort=True)
    assert aborted.finish_reason == "abort" and len(aborted.ids) < len(chat.encode(output_text(action)))
    empty = model.generate(action, max_tokens=4096, empty=True)
    assert (empty.finish_reason, len(empty.ids), empty.text) == ("stop", 0, "")


def test_workspace_tests_follow_the_edits() -> None:
    ws = Workspace.generate(random.Random(5), modules=3, functions=(2, 4), body_lines=(3, 6), bugs=2)
    rng = random.Random(0)
    first, second = ws.bugs
    assert "2 failed" in ws.call("bash", {"command": "python -m pytest -q"}, rng)
    assert first.wrong in ws.call("read_file", {"path": first.path}, rng)
    edited = ws.call("edit_file", {"path": first.path, "old_string": first.wrong, "new_string": first.right}, rng)
    assert edited.startswith("Edited")
    assert ws.fixed(first) and not ws.fixed(second)
    output = ws.call("bash", {"command": "python -m pytest -q"}, rng)
    assert "1 failed" in output and second.test_name in output and first.test_name not in output
    ws.call("write_file", {"path": second.path, "content": ws.replaced(second.path, second.wrong, second.right)}, rng)
    assert " passed in " in ws.call("bash", {"command": "python -m pytest -q"}, rng) and not ws.open_bugs()
    assert "+" + first.right.strip() in ws.call("bash", {"command": "git diff"}, rng).replace("+    ", "+")


@pytest.mark.parametrize("name", ["demo", "qwen3"])
def test_features_are_assigned_in_proportion(name: str) -> None:
    profile = PROFILES[name]
    assigned = assign_features(profile, 100, random.Random(1))
    counts = Counter(name for f in assigned for name in f.names)
    for name in FEATURES:
        rate = profile.rates.get(name, 0.0)
        # Dependent features add their base (truncation implies long_write, give_up wrong_fix).
        assert int(rate * 100) <= counts[name] <= int(rate * 100) + 1 + counts["truncation"] + counts["give_up"], name
    for f in assigned:
        assert "truncation" not in f or "long_write" in f
        assert "give_up" not in f or ("wrong_fix" in f and "long_write" not in f)
        assert (f.retry is not None) == ("retry" in f) and (f.rewrite is not None) == ("rewrite" in f)
    assert assign_features(profile, 5, random.Random(1)) == assign_features(profile, 5, random.Random(1))


# -- the command ---------------------------------------------------------------------------


def test_simulate_command_refuses_to_mix_logs(offline: None, tmp_path: Path) -> None:
    first = tito("simulate", "--out", str(tmp_path), "--sessions", "2", "--seed", "7")
    assert first.exit_code == EXIT_OK, first.stderr
    assert first.stdout == ""
    assert "wrote 2 file(s)" in first.stderr
    again = tito("simulate", "--out", str(tmp_path), "--sessions", "2", "--seed", "7")
    assert again.exit_code == EXIT_OUTPUT and "--overwrite" in again.stderr
    replaced = tito("simulate", "--out", str(tmp_path), "-n", "1", "--seed", "8", "--overwrite")
    assert replaced.exit_code == EXIT_OK
    assert {r.session_id for r in rebuild(tmp_path)} == {"demo-8-0000"}


@pytest.mark.parametrize("option", [["--profile", "huge"], ["--tokenizer", "no/such/folder"]])
def test_simulate_command_rejects_bad_options(tmp_path: Path, option: list[str]) -> None:
    result = tito("simulate", "--out", str(tmp_path / "logs"), *option)
    assert result.exit_code == EXIT_USAGE
    assert not (tmp_path / "logs").exists()


def test_command_profiles_are_the_library_profiles() -> None:
    assert {p.value for p in ProfileChoice} == set(PROFILES)


def test_simulate_reports_what_it_wrote(offline: None, tmp_path: Path) -> None:
    summary = simulate(tmp_path, 3, 11, "demo")
    assert isinstance(summary, SimulationSummary)
    assert [s.session_id for s in summary.sessions] == ["demo-11-0000", "demo-11-0001", "demo-11-0002"]
    table = pq.read_table(next(p for p in summary.files if p.name.startswith("turns-")))
    assert table.num_rows == summary.turns
    assert sum(len(x) for x in table.column("output_ids").to_pylist()) == summary.output_tokens


@pytest.mark.slow  # the package copied alone, run as processes from another folder
def test_simulate_and_inspect_work_from_any_folder_with_only_the_package(tmp_path: Path) -> None:
    """As after a non-editable install: the package alone (no fixtures/ beside it), run from elsewhere."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(REPO / "tito_cli", site / "tito_cli", ignore=shutil.ignore_patterns("__pycache__"))
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("TITO_LOGS", None)

    def tito(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "tito_cli", *args]
        return subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=300, check=False)

    made = tito("simulate", "--out", "logs", "--sessions", "2", "--seed", "3")
    assert made.returncode == 0, made.stderr
    assert "(tokenizer: fixtures/tokenizer)" in made.stderr
    shown = tito("inspect", "demo-3-0000", "--logs", "logs", "--view", "samples")
    assert shown.returncode == 0, shown.stderr
    assert "<|im_end|>" in shown.stdout  # decoded with the packaged tokenizer, not shown as ids
