"""Claude Code through ``tito serve --history canonical``: its histories drift under ``render``, not here.

The scripted model writes its tool arguments compactly (Qwen3's template re-renders them with ``tojson``'s
spacing) and thinks before each reply (the template drops that reasoning once a new user message arrives,
which ``claude -p … --continue`` sends). Two prompts in one Claude Code conversation, each a tool round
trip, through the same gateway and stand-in under ``render`` and under ``canonical``: the rebuild of the
``render`` log forks or realigns, the ``canonical`` one does not, every continued turn's prompt ids extend
the previous turn's tokens exactly, and the trained tokens are exactly the generated ones.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_drivers import run_claude
from tests.support.serve_checks import (
    assert_rebuild_trains_the_generated_tokens,
    assert_turns_are_the_ledger,
    turns_by_session,
)
from tests.support.serve_helpers import Gateway, need_extras
from tests.support.serve_standin import StandIn
from tito_cli import Corpus, Policy
from tito_cli.algorithm.session import SessionResult

FILES = {"notes.txt": "The password is marmalade-7f3a.\nThe colour is teal.\n"}
FIRST = "Read notes.txt and tell me the password."
SECOND = "Now tell me the colour written in notes.txt."
SESSION = "claude-canonical"


def _reply(reasoning: str, content: str, command: str | None = None) -> str:
    text = f"<think>\n{reasoning}\n</think>\n\n{content}"
    if command is not None:  # compact JSON: the template's tojson re-renders it with spaces
        arguments = json.dumps({"command": command, "description": "Print notes.txt"}, separators=(",", ":"))
        text += f'\n<tool_call>\n{{"name": "Bash", "arguments": {arguments}}}\n</tool_call>'
    return text


def model(prompt: str) -> str:
    """From the decoded prompt: a Bash call, then the answer; again after the second user prompt."""
    second = SECOND in prompt
    results = prompt.count("<tool_response>")
    if results == (1 if second else 0):
        return _reply("Read the file first.", "Reading it.", "cat notes.txt")
    word = "teal" if second else "marmalade-7f3a"
    return _reply("The tool printed the file.", f"It says {word}.")


def _drift(logs: Path) -> int:
    [result] = list(Corpus.open([logs]).results(Policy.named("slime-v4"), only=[SESSION]))
    assert isinstance(result, SessionResult)
    return sum(result.report.forks.values()) + result.report.realigns


@dataclass
class Conversation:
    history: str
    logs: Path
    work: Path
    ledger: list[dict[str, Any]]


@pytest.fixture(scope="module", params=["render", "canonical"])
def conversation(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Conversation:
    """Claude Code asked twice in one conversation (``--continue``) through a gateway with ``--history``."""
    need_extras("starlette", "uvicorn", "httpx")
    history = request.param
    work = tmp_path_factory.mktemp(f"canonical-{history}")
    logs = work / "logs"
    extra = ["--history", history, "--flush-every", "0.2"]
    with StandIn(model) as standin, Gateway(standin.url, logs, api="generate", extra=extra) as gateway:
        first = run_claude(gateway.url, SESSION, FIRST, work / "claude", files=FILES)
        assert first.returncode == 0 and "marmalade-7f3a" in first.stdout, first.describe()
        second = run_claude(gateway.url, SESSION, SECOND, work / "claude", continue_conversation=True)
        assert second.returncode == 0 and "teal" in second.stdout, second.describe()
        ledger = list(standin.ledger)
    return Conversation(history, logs, work, ledger)


def test_claude_code_conversations_record_what_the_upstream_saw(conversation: Conversation) -> None:
    turns = turns_by_session(conversation.logs)[SESSION]
    assert len(turns) == len(conversation.ledger) == 4
    assert_turns_are_the_ledger(turns, conversation.ledger)


def test_claude_code_conversations_continue_the_held_tokens_under_canonical(conversation: Conversation) -> None:
    turns = turns_by_session(conversation.logs)[SESSION]
    if conversation.history == "render":
        assert all("history" not in (t.metadata or {}) for t in turns)
        # The arguments re-rendered (turns 2 and 4), the reasoning dropped (turn 3).
        assert _drift(conversation.logs) >= 2
        return
    assert _drift(conversation.logs) == 0
    assert [(t.metadata["history"], t.metadata.get("history_reason")) for t in turns] == [
        ("rendered", "no held turn"),
        ("canonical", None),
        ("canonical", None),
        ("canonical", None),
    ]
    for before, after in itertools.pairwise(turns):
        held = [*before.prompt_ids.tolist(), *before.output_ids.tolist()]
        assert after.prompt_ids.tolist()[: len(held)] == held


@pytest.mark.parametrize("conversation", ["canonical"], indirect=True)
def test_a_canonical_conversation_trains_exactly_the_generated_tokens(conversation: Conversation) -> None:
    turns = turns_by_session(conversation.logs)[SESSION]
    samples = conversation.work / "samples.parquet"
    assert assert_rebuild_trains_the_generated_tokens(conversation.logs, samples, {SESSION: turns}) == 1
