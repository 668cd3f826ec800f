"""The commands shown in the documentation: find them, run them, compare what they print.

The convention (README.md, docs/*.md):

* A fenced block tagged ``console`` holds commands and their output. A line starting with ``$ ``
  is a shell command (a trailing ``\\`` continues it on the next line); the lines after it, up to
  the next command or the end of the block, are exactly what it prints, stdout and stderr together
  as one pipe receives them (no terminal: no colour, no progress bar). Its exit status is not
  checked (the output shows what happened); to show it, end the command with ``; echo "exit $?"``.
* A fenced block tagged ``sh`` holds commands shown without their output: one per line (``#``
  comments and ``\\`` continuations as in a shell). Each must exit 0.
* Placeholder: an output line that is exactly ``...`` stands for any number of lines (none
  included). Nothing else varies: outputs are compared line by line, trailing spaces ignored.

Not run, in ``sh`` blocks only (a ``console`` block must run in full):

* install steps: ``pip install …``, ``python -m pip install …``, ``pip download …`` (set-up that
  fetches, never at test time), ``python3 -m venv …`` and activating a venv
  (``. .venv/bin/activate``). In a line joining steps with ``&&`` only those steps are dropped;
  the rest runs (``tito`` and ``python`` already mean this checkout).
* the test suite (``python -m pytest …``): this check is part of the suite it would start.
* ``python benchmarks/…``: minutes long, and what they print are measurements.

Every command runs in ``bash`` with the root of a scratch copy of the repository as its working
folder (the files git lists, so no ``samples.parquet`` or ``logs/`` of the user's; one copy per
document, so a document's commands see each other's files; ``tests/npm/node_modules`` linked in when
the set-up installed it), ``tito`` and ``python`` on ``PATH``
meaning this checkout's code, no ``COLUMNS``/``NO_COLOR``/``TITO_*`` from the caller, and offline
Hugging Face libraries.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ELLIPSIS = "..."
COMMAND_TIMEOUT_S = 300
#: The npm packages the README's set-up installs (the model families' tokenizers among them): git ignores
#: them, so the scratch copy links them in.
NPM_PACKAGES = Path("tests") / "npm" / "node_modules"

#: A step of a shown command that the documentation test does not run (see the module docstring).
_NOT_RUN = re.compile(
    r"^(?:python3?\s+-m\s+venv\b|(?:\.|source)\s+\S*activate$|(?:python3?\s+-m\s+)?pip3?\s+(?:install|download)\b"
    r"|npm\s+ci\b|(?:\S+=\S*\s+)*python3?\s+-m\s+pytest\b|python3?\s+benchmarks/)"
)

_FENCE = re.compile(r"^(`{3,})\s*([\w-]*)\s*$")

#: Copied from the environment the test runs in, minus what would change what a command prints.
_DROPPED_ENV = ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "PAGER", "VIRTUAL_ENV")


@dataclass
class Command:
    """One shown command; ``expected`` is ``None`` for a command shown without its output."""

    text: str
    line: int  # 1-based line of the command in its document
    expected: list[str] | None = None


@dataclass
class Block:
    lang: str
    first: int  # 0-based index of the first line inside the fence
    end: int  # 0-based index of the closing fence
    commands: list[Command] = field(default_factory=list)


def _fenced_blocks(lines: list[str]) -> Iterator[tuple[str, int, int]]:
    """Each fenced block's language, opening line and closing line (0-based; the end at an unclosed one)."""
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, lang = opening.groups()
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != fence:
            j += 1
        yield lang, i, j
        i = j + 1


def parse(text: str) -> list[Block]:
    """The ``console`` and ``sh`` blocks of a markdown document, with their commands."""
    lines = text.split("\n")
    blocks: list[Block] = []
    for lang, i, j in _fenced_blocks(lines):
        if lang in ("console", "sh"):
            block = Block(lang, i + 1, j)
            block.commands = (_console if lang == "console" else _sh)(lines[i + 1 : j], i + 2)
            blocks.append(block)
    return blocks


def unlabelled_commands(text: str) -> list[int]:
    """Lines (1-based) opening a fenced block that is not ``console``/``sh`` but starts with ``$ ``."""
    found = []
    lines = text.split("\n")
    for lang, i, j in _fenced_blocks(lines):
        body = [line for line in lines[i + 1 : j] if line.strip()]
        if lang not in ("console", "sh") and body and body[0].startswith("$ "):
            found.append(i + 1)
    return found


def _joined(lines: list[str], k: int) -> tuple[str, int]:
    """The command starting at ``lines[k]`` with its ``\\`` continuations, and the index after it."""
    parts = [lines[k]]
    while parts[-1].endswith("\\") and k + 1 < len(lines):
        k += 1
        parts.append(lines[k])
    return "\n".join(parts), k + 1


def _console(lines: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    k = 0
    while k < len(lines):
        if lines[k].startswith("$ "):
            start = first_line + k
            text, k = _joined(lines, k)
            commands.append(Command(text[2:], start, []))
        elif commands:
            assert commands[-1].expected is not None
            commands[-1].expected.append(lines[k])
            k += 1
        else:
            raise ValueError(f"line {first_line + k}: a console block must start with a `$ ` command")
    for command in commands:
        assert command.expected is not None
        command.expected = _trimmed(command.expected)
    return commands


def _sh(lines: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    k = 0
    while k < len(lines):
        if not lines[k].strip() or lines[k].lstrip().startswith("#"):
            k += 1
            continue
        line = first_line + k
        text, k = _joined(lines, k)
        commands.append(Command(text, line))
    return commands


def _trimmed(lines: list[str]) -> list[str]:
    lines = [line.rstrip() for line in lines]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def runnable_part(command: str) -> str | None:
    """The steps of a shown ``sh`` command that the test runs (``None``: nothing to run)."""
    steps = [step.strip() for step in command.split("&&")]
    kept = [step for step in steps if not _NOT_RUN.match(step)]
    return " && ".join(kept) if kept else None


def is_exempt(command: str) -> bool:
    return any(_NOT_RUN.match(step.strip()) for step in command.split("&&"))


def matches(expected: list[str], actual: list[str]) -> bool:
    pattern = "".join(r"(?:[^\n]*\n)*?" if line == ELLIPSIS else re.escape(line + "\n") for line in expected)
    return re.fullmatch(pattern, "".join(line + "\n" for line in actual)) is not None


class Sandbox:
    """A scratch copy of the repository, and ``tito``/``python`` on ``PATH`` meaning its code."""

    def __init__(self, repo: Path, scratch: Path) -> None:
        self.root = scratch / repo.name
        _copy_checkout(repo, self.root)
        shared = repo.parent / "shared"
        if shared.is_dir():  # ``../shared`` beside the checkout, as the documents refer to it
            (scratch / "shared").symlink_to(shared)
        installed = repo / NPM_PACKAGES
        if installed.is_dir():  # what the README's set-up (npm ci --prefix tests/npm) installed
            (self.root / NPM_PACKAGES).parent.mkdir(parents=True, exist_ok=True)
            (self.root / NPM_PACKAGES).symlink_to(installed)
        bin_dir = scratch / "bin"
        bin_dir.mkdir()
        _script(bin_dir / "tito", f'#!/bin/sh\nexec "{sys.executable}" -m tito_cli "$@"\n')
        for name in ("python", "python3"):
            _script(bin_dir / name, f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV and not k.startswith("TITO_")}
        env.update(
            PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '/usr/bin:/bin')}",
            PYTHONPATH=str(self.root),
            PYTHONDONTWRITEBYTECODE="1",
            PYTHONIOENCODING="utf-8",
            HF_HUB_OFFLINE="1",
            TRANSFORMERS_OFFLINE="1",
            TERM="dumb",
        )
        self.env = env

    def run(self, command: str) -> tuple[int, list[str]]:
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=self.root,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        return done.returncode, _trimmed(done.stdout.decode("utf-8", errors="replace").split("\n"))


def _copy_checkout(repo: Path, to: Path) -> None:
    """The repository's files as git sees them (tracked, or new and not ignored), without a user's
    outputs (``samples.parquet``, ``logs/``: git-ignored); a plain copy when git cannot list them."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout.decode("utf-8", errors="surrogateescape")
    except (OSError, subprocess.SubprocessError):
        shutil.copytree(repo, to, symlinks=True, ignore=_ignored)
        return
    for name in filter(None, listed.split("\0")):
        source = repo / name
        if not source.is_file() and not source.is_symlink():
            continue  # deleted in the working tree
        target = to / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target, follow_symlinks=False)


def _ignored(folder: str, names: list[str]) -> set[str]:
    skip = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis", ".venv", "build"}
    skip.add("node_modules")  # what npm ci --prefix tests/npm installed
    return {n for n in names if n in skip or n.endswith(".egg-info")}


def _script(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def rewrite(text: str, actual: dict[int, list[str]]) -> str:
    """``text`` with the shown output of each console command (by its line) replaced by ``actual``."""
    lines = text.split("\n")
    for block in reversed(parse(text)):
        if block.lang != "console":
            continue
        new_body: list[str] = []
        for command in block.commands:
            new_body.extend(("$ " + command.text).split("\n"))
            assert command.expected is not None
            new_body.extend(actual.get(command.line, command.expected))
        lines[block.first : block.end] = new_body
    return "\n".join(lines)
