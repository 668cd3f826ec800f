"""Every command is documented, and every command the documentation shows runs and prints what it shows.

The convention for shown commands (``console`` and ``sh`` blocks) and what is not run are in
``tests/support/doc_examples.py``. After an intended change of output, rewrite the shown outputs with
``python -m pytest tests/docs/test_docs.py --tito-update-docs`` and review the diff: a console command
whose output no longer matches gets its whole real output (``...`` placeholders in it are lost and
must be put back by hand); a matching one is left as it is.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main

from tests.support import doc_examples
from tests.support.helpers import REPO, needs
from tito_cli.cli import app

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


#: Shown commands that need an optional dependency: (what they look like, the module, the extra installing it).
#: A document showing one is skipped without it, naming the extra, and fails under CI (which installs every extra).
_NEEDS_EXTRA = [
    (re.compile(r"--(?:to|format) slime\b"), "torch", "slime"),  # slime dumps are torch files
    (re.compile(r"--engine ray\b"), "ray", "ray"),
    # The capture gateway's web stack.
    *((re.compile(r"\btito serve\b"), module, "serve") for module in ("starlette", "uvicorn", "aiohttp", "httpx")),
]


@dataclass
class _Shown:
    """One shown command the test runs: a ``console`` command (compared) or an ``sh`` command's runnable part."""

    command: doc_examples.Command
    console: bool

    @property
    def runs(self) -> str:
        if self.console:
            return self.command.text
        runnable = doc_examples.runnable_part(self.command.text)
        assert runnable is not None
        return runnable


def _shown(document: Path) -> list[_Shown]:
    """What ``document`` shows that runs, in page order (an ``sh`` line of install steps alone runs nothing)."""
    shown = []
    for block in doc_examples.parse(document.read_text(encoding="utf-8")):
        for command in block.commands:
            if block.lang == "console" or doc_examples.runnable_part(command.text) is not None:
                shown.append(_Shown(command, block.lang == "console"))
    return shown


#: Every shown command, as (document, index among the document's shown commands): one test each, run in page order.
_SHOWN_COMMANDS = [(document, i) for document in DOCUMENTS for i in range(len(_shown(document)))]


class _Page:
    """One document's scratch copy of the repository, shared by the tests of its commands in page order."""

    def __init__(self, document: Path, scratch: Path) -> None:
        self.document = document
        self.name = document.relative_to(REPO)
        self.shown = _shown(document)
        self._scratch = scratch
        self._sandbox: doc_examples.Sandbox | None = None
        self.ran = 0  # how many of ``shown`` have run
        self.printed: dict[int, list[str]] = {}  # console commands printing other than shown, by line

    def skip_without_what_it_needs(self) -> None:
        texts = [s.command.text for s in self.shown]
        for pattern, module, extra in _NEEDS_EXTRA:
            if importlib.util.find_spec(module) is None and any(pattern.search(text) for text in texts):
                needs(module, extra)
        npm = str(doc_examples.NPM_PACKAGES)
        if not (REPO / npm).is_dir() and any(npm in text for text in texts):
            # As the family tests do: the tokenizers tito does not ship come from the README's set-up.
            message = f"{self.name} shows commands using {npm}: run `npm ci --prefix tests/npm` (the README's set-up)"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)

    def run(self, index: int) -> tuple[int, list[str]]:
        """Run shown command ``index``, after those before it that have not run (when tests are picked out)."""
        if self._sandbox is None:
            self._sandbox = doc_examples.Sandbox(REPO, self._scratch)
        while self.ran < index:  # their own tests report them; here they only set up what ``index`` reads
            self._sandbox.run(self.shown[self.ran].runs)
            self.ran += 1
        self.ran = index + 1
        return self._sandbox.run(self.shown[index].runs)


class _Pages:
    """The documents' pages, made on first use; at the end, ``--tito-update-docs`` rewrites what printed otherwise."""

    def __init__(self, scratch: pytest.TempPathFactory) -> None:
        self._scratch = scratch
        self._pages: dict[Path, _Page] = {}

    def __getitem__(self, document: Path) -> _Page:
        if document not in self._pages:
            self._pages[document] = _Page(document, self._scratch.mktemp(document.stem))
        return self._pages[document]

    def rewrite(self) -> None:
        for page in self._pages.values():
            if page.printed:
                text = page.document.read_text(encoding="utf-8")
                page.document.write_text(doc_examples.rewrite(text, page.printed), encoding="utf-8")


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[_Pages]:
    made = _Pages(tmp_path_factory)
    yield made
    if request.config.getoption("tito_update_docs"):
        made.rewrite()


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_shown_commands_are_tagged(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    assert not doc_examples.unlabelled_commands(text), (
        f"{document.relative_to(REPO)}: blocks at lines {doc_examples.unlabelled_commands(text)} show `$ ` commands:"
        " tag them `console`"
    )


@pytest.mark.slow  # each runs the shown commands as processes
@pytest.mark.parametrize(
    ("document", "index"),
    _SHOWN_COMMANDS,
    ids=[f"{d.relative_to(REPO)}:{_shown(d)[i].command.line}" for d, i in _SHOWN_COMMANDS],
)
def test_shown_command_runs_and_prints_what_is_shown(
    document: Path, index: int, pages: _Pages, request: pytest.FixtureRequest
) -> None:
    page = pages[document]
    page.skip_without_what_it_needs()
    shown = page.shown[index]
    where = f"{page.name}:{shown.command.line}: {shown.command.text}"
    if not shown.console:
        status, actual = page.run(index)
        assert status == 0, f"{where}\nexit {status}:\n" + "\n".join(actual)
        return
    assert not doc_examples.is_exempt(shown.command.text), f"{where}: not run here; show it in an sh block"
    expected = shown.command.expected
    assert expected is not None
    _, actual = page.run(index)
    if doc_examples.matches(expected, actual):
        return
    page.printed[shown.command.line] = actual
    if request.config.getoption("tito_update_docs"):
        return  # the page is rewritten with what it printed when the module's tests are done
    diff = difflib.unified_diff(expected, actual, "shown", "printed", lineterm="")
    hint = "after an intended change: python -m pytest tests/docs/test_docs.py --tito-update-docs"
    pytest.fail(f"{where}\n" + "\n".join(diff) + f"\n{hint}", pytrace=False)


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
        'pip install -e ".[test,ray,import,browser,serve,clients]" && npm ci --prefix tests/npm'
        " && pip download -q --no-deps --require-hashes -r tests/trl/requirements.txt -d tests/trl/wheels"
        " && python -m pytest"
    )
    assert f"grep -m1 -F '{marker}' README.md" in ci
    [command] = [line for line in readme if marker in line]
    assert command.startswith("python3 -m venv .venv && . .venv/bin/activate && ")  # works on a managed Python
