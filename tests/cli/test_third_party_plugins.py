"""Plug-ins from outside the package (tests/support/third_party_plugins.py): a policy, an output format and an
importer, each a class and one ``register_…`` line, used through the command line with no other edit
(docs/architecture.md, "Plug-ins")."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

import tito_cli
from tests.support.cli import tito
from tests.support.helpers import REPO
from tests.support.third_party_plugins import FullReward, OneTurnJsonl, TokensJsonl, register
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.policy import POLICIES
from tito_cli.capture.importers import IMPORTERS
from tito_cli.errors import EXIT_OK, EXIT_USAGE
from tito_cli.export.formats import OUTPUT_FORMATS


@pytest.fixture(autouse=True, scope="module")
def _registered() -> Iterator[None]:
    register()
    yield
    POLICIES.unregister(FullReward.name)
    OUTPUT_FORMATS.unregister(TokensJsonl.name)
    IMPORTERS.unregister(OneTurnJsonl.name)


def _words(text: str) -> str:
    """The words of an output, without the help and error panels' borders."""
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


def _invoke(*args: str) -> tuple[int, str]:
    result = tito(*list(args))
    return result.exit_code, _words(result.output)


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "traces.jsonl"
    lines = [
        {"id": f"s{k}", "prompt": {"role": "user", "content": f"question {k}"}, "ids": [1, 2, 3 + k],
         "answer": f"answer {k}", "answer_ids": [7, 8, k], "reward": float(k)}
        for k in range(3)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


def test_the_three_plug_ins_work_end_to_end_from_the_command_line(source: Path, tmp_path: Path) -> None:
    log, out = tmp_path / "log", tmp_path / "samples.jsonl"
    code, output = _invoke("import", "test-one-turn", str(source), "--out", str(log))
    assert code == EXIT_OK, output
    assert "sessions imported 3" in output

    code, output = _invoke("rebuild", str(log), "--out", str(out), "--format", "test-tokens-jsonl",
                           "--policy", "test-full-reward")  # fmt: skip
    assert code == EXIT_OK, output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert rows == [
        {"session_id": f"s{k}", "tokens": [1, 2, 3 + k, 7, 8, k], "reward": float(k), "policy": "test-full-reward"}
        for k in range(3)
    ]

    # --from reads the registered importer too, in one step.
    again = tmp_path / "again.jsonl"
    code, output = _invoke("rebuild", str(source), "--from", "test-one-turn", "--out", str(again),
                           "--format", "test-tokens-jsonl", "--policy", "test-full-reward")  # fmt: skip
    assert code == EXIT_OK, output
    assert again.read_bytes() == out.read_bytes()


def _help_of_a_tito_with_the_plug_ins(command: str) -> str:
    """``tito COMMAND --help`` of a program that registers the plug-ins, then runs tito's command line
    (help texts are built with the command line, from the classes registered by then)."""
    code = (
        f"import sys; sys.path.insert(0, {str(REPO)!r}); import tests.support.third_party_plugins as plugins; "
        f"plugins.register(); from tito_cli.cli import main; sys.argv = ['tito', {command!r}, '--help']; main()"
    )
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == EXIT_OK, done.stderr
    return _words(done.stdout)


def test_help_and_option_checks_come_from_the_classes(source: Path, tmp_path: Path) -> None:
    rebuild_help = _help_of_a_tito_with_the_plug_ins("rebuild")
    assert "'test-full-reward': slime-v4 whose samples each carry the session's whole reward" in rebuild_help
    assert "test-tokens-jsonl" in rebuild_help
    import_help = _help_of_a_tito_with_the_plug_ins("import")
    assert "'test-one-turn': JSONL, one single-turn session a line" in import_help

    # A format option the new format does not have is refused, naming the format that has it.
    code, output = _invoke("rebuild", str(source), "--from", "test-one-turn", "--out", str(tmp_path / "x"),
                           "--format", "test-tokens-jsonl", "--labels")  # fmt: skip
    assert code == EXIT_USAGE
    assert "applies to the trl format only, not test-tokens-jsonl" in output
    code, output = _invoke("import", "test-one-turn", str(source), "--out", str(tmp_path / "y"),
                           "--session-header", "X-Session")  # fmt: skip
    assert code == EXIT_USAGE
    assert "applies to the openai-exchanges format only, not test-one-turn" in output


def test_the_library_takes_the_new_formats_own_options(source: Path, tmp_path: Path) -> None:
    log = tmp_path / "log"
    tito_cli.import_traces("test-one-turn", [source], log)
    out = tmp_path / "prefixed.jsonl"
    tito_cli.rebuild([log], out, output_format="test-tokens-jsonl", options={"prefix": "> "}, workers=1)
    assert [line[:2] for line in out.read_text(encoding="utf-8").splitlines()] == ["> "] * 3
    with pytest.raises(tito_cli.ExportError, match="option 'split_by' applies to the slime output format only"):
        tito_cli.rebuild([log], tmp_path / "bad", output_format="test-tokens-jsonl", options={"split_by": 2})


def test_a_subclass_is_not_a_plug_in_until_registered() -> None:
    @dataclass(frozen=True)
    class Unlisted(SlimeV4):
        name: ClassVar[str] = "test-unlisted"

    assert "test-unlisted" not in POLICIES
    with pytest.raises(ValueError, match="unknown policy 'test-unlisted'"):
        tito_cli.Policy.named("test-unlisted")
