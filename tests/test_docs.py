"""Every command is documented, and every command the documentation shows runs and prints what it shows.

The convention for shown commands (``console`` and ``sh`` blocks) and what is not run are in
``tests/doc_examples.py``. After an intended change of output, rewrite the shown outputs with
``python -m pytest tests/test_docs.py --tito-update-docs`` and review the diff: a console command
whose output no longer matches gets its whole real output (``...`` placeholders in it are lost and
must be put back by hand); a matching one is left as it is.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
from pathlib import Path

import pytest
import typer.main

from tito_cli.cli import app

from . import doc_examples
from .helpers import REPO, needs

#: The pages and their notes (docs/notes/: dated measurements, ledgers, provenance): every shown command runs.
DOCUMENTS = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "docs" / "notes").glob("*.md")])


def _commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


def test_every_command_and_option_has_help() -> None:
    commands = _commands()
    assert {"rebuild", "inspect", "ls", "stats", "dump", "check", "simulate"} <= set(commands)
    for name, command in commands.items():
        assert (command.help or "").strip(), name  # type: ignore[attr-defined]
        for param in command.params:  # type: ignore[attr-defined]
            if param.param_type_name == "option" and param.name != "help":
                assert (param.help or "").strip(), f"{name} {param.opts}"


def test_every_command_is_in_the_readme_and_has_a_docs_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    docs = " ".join(p.read_text(encoding="utf-8") for p in (REPO / "docs").glob("*.md"))
    for name in _commands():
        assert f"`tito {name}" in readme, name
        assert f"tito {name}" in docs, name


#: A shown command that writes slime's torch files (needs the optional torch).
#: Shown commands that need an optional dependency: (what they look like, the module, the extra installing it).
#: A document showing one is skipped without it, naming the extra, and fails under CI (which installs every extra).
_NEEDS_EXTRA = [
    (re.compile(r"--(?:to|format) slime\b"), "torch", "slime"),  # slime dumps are torch files
    (re.compile(r"--engine ray\b"), "ray", "ray"),
]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shown_commands_run_and_print_what_is_shown(
    document: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    text = document.read_text(encoding="utf-8")
    name = document.relative_to(REPO)
    assert not doc_examples.unlabelled_commands(text), (
        f"{name}: blocks at lines {doc_examples.unlabelled_commands(text)} show `$ ` commands: tag them `console`"
    )
    blocks = doc_examples.parse(text)
    if not blocks:
        return
    shown = [command.text for block in blocks for command in block.commands]
    for pattern, module, extra in _NEEDS_EXTRA:
        if importlib.util.find_spec(module) is None and any(pattern.search(text) for text in shown):
            needs(module, extra)
    npm = str(doc_examples.NPM_PACKAGES)
    if not (REPO / npm).is_dir() and any(npm in text for text in shown):
        # As the family tests do: the tokenizers tito does not ship come from the README's set-up.
        message = f"{name} shows commands using {npm}: run `npm ci --prefix tests/npm` (the README's set-up)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    sandbox = doc_examples.Sandbox(REPO, tmp_path)
    differences: list[str] = []  # console commands printing other than shown
    failures: list[str] = []  # sh commands that did not exit 0
    printed: dict[int, list[str]] = {}
    for block in blocks:
        for command in block.commands:
            where = f"{name}:{command.line}: {command.text}"
            if block.lang == "console":
                assert not doc_examples.is_exempt(command.text), f"{where}: not run here; show it in an sh block"
                assert command.expected is not None
                _, actual = sandbox.run(command.text)
                if not doc_examples.matches(command.expected, actual):
                    printed[command.line] = actual
                    diff = difflib.unified_diff(command.expected, actual, "shown", "printed", lineterm="")
                    differences.append(f"{where}\n" + "\n".join(diff))
                continue
            runnable = doc_examples.runnable_part(command.text)
            if runnable is not None:
                status, actual = sandbox.run(runnable)
                if status != 0:
                    failures.append(f"{where}\nexit {status}:\n" + "\n".join(actual))
    if printed and request.config.getoption("tito_update_docs"):
        document.write_text(doc_examples.rewrite(text, printed), encoding="utf-8")
        differences = []
    if differences:
        differences.append("after an intended change: python -m pytest tests/test_docs.py --tito-update-docs")
    assert not failures + differences, "\n\n".join(failures + differences)


def test_the_convention_is_parsed_and_compared_as_documented() -> None:
    text = "\n".join(
        [
            "```console",
            "$ tito a \\",
            "  --b",
            "one",
            "...",
            "three  ",
            "",
            "$ tito c",
            "```",
            "```sh",
            "# a comment",
            "python3 -m venv .venv && . .venv/bin/activate && pip install . && tito rebuild x",
            "python -m pytest",
            "```",
            "```text",
            "$ not tagged",
            "```",
        ]
    )
    console, sh = doc_examples.parse(text)
    first, second = console.commands
    assert (first.text, first.line, first.expected) == ("tito a \\\n  --b", 2, ["one", "...", "three"])
    assert (second.text, second.expected) == ("tito c", [])
    assert [doc_examples.runnable_part(c.text) for c in sh.commands] == ["tito rebuild x", None]
    assert doc_examples.unlabelled_commands(text) == [15]
    assert doc_examples.matches(first.expected, ["one", "three"])
    assert doc_examples.matches(first.expected, ["one", "two", "2b", "three"])
    assert not doc_examples.matches(first.expected, ["one", "two"])
    assert not doc_examples.matches(["one"], ["one", "two"])
    rewritten = doc_examples.rewrite(text, {2: ["uno"], 8: ["dos"]})
    assert rewritten.split("\n")[:7] == ["```console", "$ tito a \\", "  --b", "uno", "$ tito c", "dos", "```"]


def test_ci_runs_the_readme_test_command() -> None:
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    marker = (
        'pip install -e ".[test,ray,import,browser,serve,clients]" && npm ci --prefix tests/npm && python -m pytest'
    )
    assert f"grep -m1 -F '{marker}' README.md" in ci
    [command] = [line for line in readme if marker in line]
    assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && ")  # works on a managed Python
