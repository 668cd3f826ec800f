"""Sessions with provenance whose routed experts are a function of the prefix alone.

The stand-in engine computes, for a call's tokens, row ``p`` as :func:`routing` of ``tokens[:p + 1]``
(a hash of the prefix into ``[LAYERS, TOPK]`` ints), so a test checks any row of any sample against the
sample's own prefix, with no knowledge of which call computed it.  It reports weight versions that
change every ``version_every`` generated tokens (so mid-session and mid-call), as SGLang's
``meta_info.weight_versions`` spans over the output.

A session is played as a harness would record it: messages rendered to ids by :func:`render`
(one token per role and per word, an end token per message, an assistant prefix), each call recorded
through the real :class:`~tito_cli.capture.writer.TurnLogWriter` with the rows the engine returned for
``[start, len(tokens) - 1)``, ``start`` being what a gateway sends as ``routed_experts_start``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tito_cli.capture.writer import TurnLogWriter

LAYERS = 3
TOPK = 2
EXPERTS = 64
END = 9009
ASSISTANT = 9000
#: An assistant message renders as the prompt's assistant prefix and then its output: a reply comes
#: back in the next prompt as the ids it was generated as.
ROLE = {"system": 1000, "user": 2000, "assistant": ASSISTANT, "tool": 4000}


def word_id(word: str) -> int:
    return 10_000 + int.from_bytes(hashlib.sha256(word.encode()).digest()[:3], "little") % 100_000


def render(messages: list[dict[str, Any]]) -> list[int]:
    """The prompt ids of ``messages`` and the assistant prefix (a chat template, in miniature)."""
    ids: list[int] = []
    for message in messages:
        ids += [ROLE[message["role"]], *(word_id(w) for w in message["content"].split()), END]
    return [*ids, ASSISTANT]


def reply(content: str) -> list[int]:
    """The output ids that generate ``content`` (its words and the end token)."""
    return [*(word_id(w) for w in content.split()), END]


def routing(prefix: np.ndarray | list[int]) -> np.ndarray:
    """The routing the engine computes with ``prefix`` as its input: ``[LAYERS, TOPK]`` int32."""
    digest = hashlib.blake2b(np.asarray(prefix, dtype="<i4").tobytes(), digest_size=LAYERS * TOPK).digest()
    return (np.frombuffer(digest, dtype=np.uint8).astype(np.int32) % EXPERTS).reshape(LAYERS, TOPK)


def check_rows(tokens: np.ndarray, rows: np.ndarray) -> None:
    """Every row of a sample is the routing of the sample's own prefix up to and including its token."""
    assert rows.shape == (len(tokens) - 1, LAYERS, TOPK)
    for i in range(len(tokens) - 1):
        assert np.array_equal(rows[i], routing(tokens[: i + 1])), f"row {i} is not the routing of tokens[:{i + 1}]"


@dataclass
class Engine:
    """The stand-in inference server: routing by prefix, weight versions changing every few tokens."""

    version_every: int = 5
    generated: int = 0

    def version(self) -> str:
        return f"v{self.generated // self.version_every}"

    def generate(self, tokens: list[int], outputs: int, start: int) -> tuple[list[dict[str, Any]], np.ndarray]:
        """Weight-version spans over the ``outputs`` last tokens, and rows for positions ``[start, len - 1)``."""
        spans: list[dict[str, Any]] = []
        for index in range(outputs):
            version = self.version()
            if spans and spans[-1]["version"] == version:
                spans[-1]["end"] = index + 1
            else:
                spans.append({"version": version, "start": index, "end": index + 1})
            self.generated += 1
        rows = np.array([routing(tokens[: p + 1]) for p in range(start, len(tokens) - 1)], dtype=np.int32)
        return spans, rows.reshape(-1, LAYERS, TOPK)


@dataclass
class Harness:
    """One session recorded call by call; ``start`` defaults to what the session holds (the gateway's rule)."""

    writer: TurnLogWriter
    session_id: str
    engine: Engine = field(default_factory=Engine)
    #: Token sequences of earlier calls (prompt + output): the gateway's view of held rows.
    calls: list[list[int]] = field(default_factory=list)
    #: (spans, seq) of each call, to compare with the samples.
    versions: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    def held_start(self, tokens: list[int]) -> int:
        """The longest prefix whose rows the session holds (an earlier call's last token has no row)."""
        best = 0
        for call in self.calls:
            shared = 0
            for a, b in zip(call, tokens, strict=False):
                if a != b:
                    break
                shared += 1
            best = max(best, min(shared, len(call) - 1))
        return best

    def call(
        self,
        messages: list[dict[str, Any]],
        content: str,
        *,
        prompt_ids: list[int] | None = None,
        start: int | None = None,
        experts: bool = True,
        call_kind: str | None = None,
        output_ids: list[int] | None = None,
    ) -> int:
        prompt = render(messages) if prompt_ids is None else prompt_ids
        output = reply(content) if output_ids is None else output_ids
        tokens = prompt + output
        begin = self.held_start(tokens) if start is None else start
        spans, rows = self.engine.generate(tokens, len(output), begin)
        seq = self.writer.record_turn(
            self.session_id,
            prompt,
            output,
            None,
            "stop",
            messages,
            {"role": "assistant", "content": content},
            weight_versions=spans,
            routed_experts=rows if experts else None,
            routed_experts_start=begin,
            sampling={"temperature": 1.0, "top_p": 1.0},
            call_kind=call_kind,
        )
        self.versions[seq] = spans
        if experts:
            self.calls.append(tokens)
        return seq
