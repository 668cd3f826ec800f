"""A third party's plug-ins: a policy, an output format and an importer, each a class, and one
``register_…`` line each (tests/cli/test_third_party_plugins.py uses them through the command line).

This module never imports tito's command line, so that a program can register the plug-ins and
then build the command line (whose help texts list them).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pyarrow as pa

import tito_cli
from tito_cli._atomic import StagedFile
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.capture.importers.base import ImportedSession, ImportedTurn, Importer, SessionOutcome, SourceRef
from tito_cli.errors import InvalidSessionError
from tito_cli.export.base import Sink, SinkContext


@dataclass(frozen=True)
class FullReward(SlimeV4):
    name: ClassVar[str] = "test-full-reward"
    summary: ClassVar[str] = "slime-v4 whose samples each carry the session's whole reward"
    default_reward_mode = "full"


@dataclass(frozen=True)
class TokensOptions:
    prefix: str = field(default="", metadata={"help": "written before each line"})


class TokensJsonl(Sink):
    """One JSON line per sample: its session, token ids, reward, and the policy that made it."""

    name = "test-tokens-jsonl"
    summary = "one JSON line per sample: session_id, tokens, reward"
    Options = TokensOptions

    def __init__(self, out: Path, context: SinkContext) -> None:
        super().__init__(out, context)
        self.lines: list[str] = []

    def add(self, table: pa.Table) -> None:
        for row in table.select(["session_id", "tokens", "reward"]).to_pylist():
            row["policy"] = self.context.policy.name
            self.lines.append(self.context.options.prefix + json.dumps(row) + "\n")

    def close(self) -> list[StagedFile]:
        self.check_target(self.out)
        staged = StagedFile(self.out)
        staged.path.write_text("".join(self.lines), encoding="utf-8")
        self.samples_written, self.files = len(self.lines), [self.out]
        return [staged]

    def abort(self) -> None:
        self.lines = []


class OneTurnJsonl(Importer):
    """Each line one session of one generation call: ``{"id", "prompt", "ids", "answer", "answer_ids", "reward"}``."""

    name = "test-one-turn"
    summary = "JSONL, one single-turn session a line"
    sources_hint = "JSONL file"

    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        self.check_sources(sources)
        for path in sources:
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
                r, ref = json.loads(line), SourceRef(str(path), number)
                answer = {"role": "assistant", "content": r["answer"]}
                turn = ImportedTurn(r["ids"], r["answer_ids"], None, "stop", [r["prompt"]], answer, ref)
                yield ImportedSession(r["id"], [turn], ref, SessionOutcome(r["reward"], index=number - 1))


def register() -> None:
    tito_cli.register_policy(FullReward)
    tito_cli.register_output_format(TokensJsonl)
    tito_cli.register_importer(OneTurnJsonl)
