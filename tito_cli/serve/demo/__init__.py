"""The demo upstream: an inference server without a GPU, for trying ``tito serve`` and for its tests.

``tito demo-upstream`` (or :class:`DemoUpstream` in a thread) answers SGLang's native ``/generate`` and
vLLM's ``/v1/chat/completions`` with ``return_token_ids`` exactly as those servers put them on the wire
(``wire.py``), generating through a real tokenizer. What it generates is a script's (``agent.py``): a
scripted Qwen3 agent that, asked to create a file with some content, writes it with the client's shell
tool, reads it back, and then answers — so the real Claude Code and Codex complete a multi-turn,
tool-using task through the gateway on a laptop.
"""

from __future__ import annotations

from .agent import demo_agent, qwen3_output
from .server import DemoUpstream

__all__ = ["DemoUpstream", "demo_agent", "qwen3_output"]
