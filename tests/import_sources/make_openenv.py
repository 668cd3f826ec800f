"""Write the OpenEnv import fixture with OpenEnv's own capture code (run once, here, offline).

OpenEnv's capture proxy (``openenv/core/harness/capture/``) records every model call of a rollout
as a ``TurnNode`` in a ``RolloutGraph`` (calls linked by token prefix) and hands a trainer the
document ``export.export_session`` builds: the calls in arrival order (``turns``) and one row per
root-to-leaf path (``sequences``), each labelled ``agent``, ``auxiliary`` or ``discarded``.  This
script feeds that code the calls of two fixture rollouts and writes the documents it returns, one
a line, to ``openenv/rollouts.jsonl``; the ground truth (every call's ids, messages and label) goes
to ``expected_turns.jsonl`` as for the other formats.  The package's heavy imports (its server,
gradio, fastmcp) are never loaded: the three modules the export is made of (``graph.py``,
``validate.py``, ``export.py``, standard library only) are taken from the published wheel, unchanged,
under a package of their own.  Made with::

    pip download --no-deps openenv==0.10.0 -d /tmp/openenv
    python -m tests.import_sources.make_openenv /tmp/openenv/openenv-0.10.0-py3-none-any.whl

(wheel sha256 5e0a1019253802551de7890f7638c977c4a36540a4b19f01e5a6fcdb5f5fd135).
"""

from __future__ import annotations

import hashlib
import importlib
import sys
import tempfile
import zipfile
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from .make import HERE, TOOLS, Conversation, chat_session, write_jsonl

WHEEL_SHA256 = "5e0a1019253802551de7890f7638c977c4a36540a4b19f01e5a6fcdb5f5fd135"
MODULES = ("graph", "validate", "export")
PACKAGE = "openenv/core/harness/capture"


def load_capture(wheel: Path, into: Path) -> Any:
    """OpenEnv's export module, its graph and validation beside it, as the package ``openenv_capture``."""
    data = wheel.read_bytes()
    assert hashlib.sha256(data).hexdigest() == WHEEL_SHA256, f"{wheel} is not openenv 0.10.0's wheel"
    package = into / "openenv_capture"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    with zipfile.ZipFile(wheel) as archive:
        for name in MODULES:
            (package / f"{name}.py").write_bytes(archive.read(f"{PACKAGE}/{name}.py"))
    sys.path.insert(0, str(into))
    return importlib.import_module("openenv_capture.export"), importlib.import_module("openenv_capture.graph")


def node(graph_module: Any, node_id: str, turn: dict[str, Any], n_tools: int) -> Any:
    return graph_module.TurnNode(
        node_id=node_id,
        prompt_ids=list(turn["prompt_ids"]),
        sampled_ids=list(turn["output_ids"]),
        sampled_logprobs=list(turn["output_logprobs"]),
        model="fixture",
        finish_reason=turn["finish_reason"],
        n_tools=n_tools,
        request_messages=list(turn["prompt_messages"]),
        request_tools=turn["tools"],
        response_message=turn["response_message"],
    )


def agent_rollout() -> tuple[str, list[tuple[str, dict[str, Any], int, str]]]:
    """A tool-using agent whose first call was retried, and a title generator beside it."""
    sid = "openenv-agent"
    agent = Conversation(sid, TOOLS)
    agent.add({"role": "system", "content": "You are a coding agent."})
    agent.add({"role": "user", "content": "What does setup.cfg say about flake8?"})
    # The first attempt: its reply is thrown away (a parse failure), and the same prompt is sent again.
    before = list(agent.tokens)
    retry = agent.generate({"content": "Let me look"}, finish="length")
    agent.messages.pop()
    agent.turns.pop()
    agent.tokens = before
    call = {"id": "call_a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "setup.cfg"}'}}
    first = agent.generate({"content": None, "tool_calls": [call]})
    agent.add({"role": "tool", "tool_call_id": "call_a", "content": "[flake8]\nmax-line-length = 100"})
    title_chat = Conversation(sid)
    title_chat.add({"role": "user", "content": "Write a five-word title for: What does setup.cfg say about flake8?"})
    title = title_chat.generate({"content": "Flake8 settings in setup.cfg"})
    second = agent.generate({"content": "It sets max-line-length to 100."})
    calls = [
        ("n0", retry, 1, "discarded"),
        ("n1", first, 1, "agent"),
        ("n2", title, 0, "auxiliary"),
        ("n3", second, 1, "agent"),
    ]
    return sid, calls


def chat_rollout() -> tuple[str, list[tuple[str, dict[str, Any], int, str]]]:
    """A chat without a tool manifest anywhere: every live path is the agent's (OpenEnv's rule)."""
    conversation = chat_session("openenv-chat")
    return conversation.sid, [(f"n{k}", t, 0, "agent") for k, t in enumerate(conversation.turns)]


def main(wheel: Path) -> None:
    folder = HERE / "openenv"
    truth: list[dict[str, Any]] = []
    documents: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        export, graph_module = load_capture(wheel, Path(scratch))
        for sid, calls in (agent_rollout(), chat_rollout()):
            graph = graph_module.RolloutGraph()
            for seq, (node_id, turn, n_tools, kind) in enumerate(calls):
                graph.add_turn(node(graph_module, node_id, turn, n_tools))
                truth.append({**turn, "session_id": sid, "seq": seq, "call_kind": kind})
            session = SimpleNamespace(
                graph=graph, session_id=sid, metadata={"task": sid}, findings=[], budget_stop_count=0, purpose="auto"
            )
            documents.append(export.export_session(session, include_discarded=True, include_messages=True))
    write_jsonl(folder / "rollouts.jsonl", documents)
    write_jsonl(folder / "expected_turns.jsonl", truth)
    rewards = {"openenv-agent": 1.0, "openenv-chat": 0.25}
    write_jsonl(folder / "rewards.jsonl", [{"session_id": s, "reward": r} for s, r in rewards.items()])
    write_jsonl(folder / "expected_sessions.jsonl", [{"session_id": s, "reward": r} for s, r in rewards.items()])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
