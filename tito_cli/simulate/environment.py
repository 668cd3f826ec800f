"""The scripted environment: a small Python repository with planted bugs, and its tools.

A :class:`Workspace` holds the files of a generated project, the bugs planted
in it and the tests that catch them.  Its tools (``bash``, ``read_file``,
``grep``, ``edit_file``, ``write_file``) answer the way a coding agent's
tools do, and their answers follow the state: once an edit removes a bug,
its test passes.  Sub-agent tools (``task``, ``agent_output``) are answered
by the session, which owns the sub-agents.
"""

from __future__ import annotations

import difflib
import random
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .text import TextGen

__all__ = ["MAIN_TOOLS", "SUB_TOOLS", "Bug", "Workspace", "tool_specs"]


def _spec(name: str, description: str, params: dict[str, tuple[str, str]], required: list[str]) -> dict[str, Any]:
    properties = {key: {"type": kind, "description": text} for key, (kind, text) in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


_SPECS = {
    "bash": _spec(
        "bash",
        "Run a shell command in the repository and return its output.",
        {"command": ("string", "The command line to run.")},
        ["command"],
    ),
    "read_file": _spec(
        "read_file",
        "Read a file; lines are numbered from 1.",
        {
            "path": ("string", "Path relative to the repository root."),
            "offset": ("integer", "First line to read (1-based)."),
            "limit": ("integer", "How many lines to read."),
        },
        ["path"],
    ),
    "grep": _spec(
        "grep",
        "Search file contents for a literal string.",
        {"pattern": ("string", "The text to look for."), "path": ("string", "File or folder to search.")},
        ["pattern"],
    ),
    "edit_file": _spec(
        "edit_file",
        "Replace one exact occurrence of old_string with new_string in a file.",
        {
            "path": ("string", "The file to edit."),
            "old_string": ("string", "Text to replace; must occur exactly once."),
            "new_string": ("string", "The replacement."),
        },
        ["path", "old_string", "new_string"],
    ),
    "write_file": _spec(
        "write_file",
        "Create or overwrite a file with the given content.",
        {"path": ("string", "The file to write."), "content": ("string", "The full new content.")},
        ["path", "content"],
    ),
    "task": _spec(
        "task",
        "Start a sub-agent on a self-contained task. It runs in the background; read its report with agent_output.",
        {
            "description": ("string", "A short title for the task."),
            "prompt": ("string", "Everything the sub-agent needs to know."),
        },
        ["description", "prompt"],
    ),
    "agent_output": _spec(
        "agent_output",
        "Wait for a sub-agent started with task and return its final report.",
        {"agent_id": ("string", "The id returned by task.")},
        ["agent_id"],
    ),
}

MAIN_TOOLS = ("bash", "read_file", "grep", "edit_file", "write_file", "task", "agent_output")
SUB_TOOLS = ("bash", "read_file", "grep")


def tool_specs(names: tuple[str, ...]) -> list[dict[str, Any]]:
    return [_SPECS[n] for n in names]


@dataclass(slots=True)
class Bug:
    """A wrong line planted in a function, and the test that catches it."""

    path: str
    function: str
    wrong: str
    right: str
    test_path: str
    test_name: str
    test_line: int
    assertion: str
    message: str

    def line_number(self, lines: list[str]) -> int:
        """1-based line where the buggy function is defined."""
        for i, line in enumerate(lines, 1):
            if line.startswith(f"def {self.function}("):
                return i
        return 1


class _Shape(NamedTuple):
    """A kind of bug.  ``{n}`` is a noun that keeps lines unique; ``{k}``/``{t}`` a key and its typo."""

    arguments: str
    setup: list[str]
    wrong: str
    right: str
    tail: list[str]
    test_call: str
    expected: str
    actual: str


_BUG_SHAPES = (
    _Shape(
        "values",
        ["    {n}_total = 0", "    for value in values:", "        {n}_total += value"],
        "    return {n}_total + 1",
        "    return {n}_total",
        [],
        "[1, 2, 3]",
        "6",
        "7",
    ),
    _Shape(
        "count, limit",
        ["    {n}_seen = count"],
        "    if {n}_seen > limit:",
        "    if {n}_seen >= limit:",
        ["        return True", "    return False"],
        "3, 3",
        "True",
        "False",
    ),
    _Shape(
        "record",
        [],
        '    {n}_name = record.get("{t}")',
        '    {n}_name = record.get("{k}")',
        ["    return {n}_name"],
        '{{"{k}": "ada"}}',
        "'ada'",
        "None",
    ),
    _Shape(
        "items",
        [],
        "    {n}_order = sorted(items)",
        "    {n}_order = sorted(items, reverse=True)",
        ["    return {n}_order[0] if {n}_order else None"],
        "[1, 3, 2]",
        "3",
        "1",
    ),
)


def _typo(word: str, rng: random.Random) -> str:
    if len(word) < 3:
        return word + word[-1]
    i = rng.randrange(len(word) - 1)
    swapped = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    return swapped if swapped != word else word + word[-1]


@dataclass
class Workspace:
    """A generated repository with planted bugs; its tools answer from the current file state."""

    project: str
    files: dict[str, list[str]]
    bugs: list[Bug]
    #: Passing tests per test file (their count only shows in pytest output).
    passing: dict[str, int]
    original: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def generate(
        cls,
        rng: random.Random,
        *,
        modules: int,
        functions: tuple[int, int],
        body_lines: tuple[int, int],
        bugs: int,
        long_target: bool = False,
    ) -> Workspace:
        """A repository of ``modules`` modules; ``bugs`` of them get one planted bug each.

        With ``long_target`` the first buggy module is made long (about two
        thousand tokens), so rewriting it whole is a long output.
        """
        text = TextGen(rng)
        project = text.project()
        names = text.module_names(modules)
        files: dict[str, list[str]] = {}
        planted: list[Bug] = []
        passing: dict[str, int] = {}
        used_functions: set[str] = set()
        for m, module in enumerate(names):
            path = f"src/{project}/{module}.py"
            test_path = f"tests/test_{module}.py"
            lines = [f'"""{text.sentence()}"""', "", "import logging", "", "logger = logging.getLogger(__name__)"]
            count = rng.randint(*functions)
            if long_target and m == 0:
                count = max(count, rng.randint(20, 26))
            bug_at = rng.randrange(count) if m < bugs else -1
            tests: list[str] = ["import pytest", "", f"from {project}.{module} import *", "", ""]
            for f in range(count):
                name = text.function_name()
                while name in used_functions:
                    name = text.function_name()
                used_functions.add(name)
                lines += ["", ""]
                if f == bug_at:
                    bug, body = cls._plant(rng, text, name, path, test_path)
                    bug.test_line = len(tests) + 2  # the assert line, 1-based
                    tests += [f"def {bug.test_name}():", f"    {bug.assertion}", "", ""]
                    planted.append(bug)
                    lines += body
                else:
                    lines += text.function(name, rng.randint(*body_lines))
                    tests += [f"def test_{name}():", f"    assert {name} is not None", "", ""]
            files[path] = lines
            files[test_path] = tests[:-2]
            passing[test_path] = count - (1 if bug_at >= 0 else 0)
        files["pyproject.toml"] = [
            "[project]",
            f'name = "{project}"',
            'version = "0.3.1"',
            'requires-python = ">=3.10"',
        ]
        files["README.md"] = [f"# {project}", "", text.sentence(), "", "Run the tests with `python -m pytest -q`."]
        workspace = cls(project=project, files=dict(sorted(files.items())), bugs=planted, passing=passing)
        workspace.original = {p: list(ls) for p, ls in workspace.files.items()}
        return workspace

    @staticmethod
    def _plant(rng: random.Random, text: TextGen, name: str, path: str, test_path: str) -> tuple[Bug, list[str]]:
        argument, setup, wrong, right, tail, call, expected, actual = rng.choice(_BUG_SHAPES)
        noun = text.variable().split("_")[-1] + str(rng.randint(1, 99))
        key = text.variable().split("_")[-1]
        slots = {"n": noun, "k": key, "t": _typo(key, rng)}
        body = [f"def {name}({argument}):", f'    """{text.sentence()}"""']
        body += [s.format(**slots) for s in setup]
        body.append(wrong.format(**slots))
        body += [t.format(**slots) for t in tail]
        call = call.format(**slots)
        bug = Bug(
            path=path,
            function=name,
            wrong=wrong.format(**slots),
            right=right.format(**slots),
            test_path=test_path,
            test_name=f"test_{name}",
            test_line=0,
            assertion=f"assert {name}({call}) == {expected}",
            message=f"assert {actual} == {expected}",
        )
        return bug, body

    # -- state -------------------------------------------------------------

    def fixed(self, bug: Bug) -> bool:
        lines = self.files.get(bug.path, [])
        return bug.wrong not in lines and bug.right in lines

    def open_bugs(self) -> list[Bug]:
        return [b for b in self.bugs if not self.fixed(b)]

    def replaced(self, path: str, old_line: str, new_line: str) -> str:
        """The content of ``path`` with ``old_line`` replaced (what a whole-file rewrite sends)."""
        return "\n".join(new_line if line == old_line else line for line in self.files[path]) + "\n"

    # -- tools -------------------------------------------------------------

    def call(self, name: str, arguments: dict[str, Any], rng: random.Random) -> str:
        """Run one tool call; unknown tools and bad arguments answer with an error, as real tools do."""
        try:
            if name == "bash":
                return self._bash(str(arguments["command"]), rng)
            if name == "read_file":
                return self._read(str(arguments["path"]), arguments.get("offset"), arguments.get("limit"))
            if name == "grep":
                return self._grep(str(arguments["pattern"]), str(arguments.get("path", ".")))
            if name == "edit_file":
                return self._edit(str(arguments["path"]), str(arguments["old_string"]), str(arguments["new_string"]))
            if name == "write_file":
                return self._write(str(arguments["path"]), str(arguments["content"]))
        except KeyError as missing:
            return f"Error: missing argument {missing}"
        return f"Error: unknown tool {name!r}"

    def _bash(self, command: str, rng: random.Random) -> str:
        if command.startswith(("find", "ls")):
            python_only = "*.py" in command
            return "\n".join(f"./{p}" for p in self.files if not python_only or p.endswith(".py"))
        if command.startswith("python -m pytest"):
            return self._pytest(rng)
        if command.startswith("git diff"):
            return self._diff() or ""
        if command.startswith("git status"):
            changed = [p for p in self.files if self.files[p] != self.original.get(p)]
            lines = ["On branch main"]
            if changed:
                lines += ["Changes not staged for commit:", *(f"\tmodified:   {p}" for p in changed)]
            else:
                lines.append("nothing to commit, working tree clean")
            return "\n".join(lines)
        if command.startswith("grep -rn "):
            return self._grep(command.split(" ", 2)[2].strip("'\""), ".")
        return f"bash: {command.split()[0]}: command not found"

    def _read(self, path: str, offset: Any, limit: Any) -> str:
        lines = self.files.get(path)
        if lines is None:
            return f"Error: {path}: no such file"
        start = max(1, int(offset or 1))
        stop = len(lines) if limit is None else min(len(lines), start - 1 + int(limit))
        return "\n".join(f"{i:6d}\t{lines[i - 1]}" for i in range(start, stop + 1))

    def _grep(self, pattern: str, where: str) -> str:
        where = where.rstrip("/")
        hits = [
            f"{path}:{i}:{line}"
            for path, lines in self.files.items()
            if where in (".", "") or path == where or path.startswith(where + "/")
            for i, line in enumerate(lines, 1)
            if pattern in line
        ]
        return "\n".join(hits) if hits else "No matches found."

    def _edit(self, path: str, old: str, new: str) -> str:
        lines = self.files.get(path)
        if lines is None:
            return f"Error: {path}: no such file"
        content = "\n".join(lines)
        count = content.count(old)
        if count != 1:
            return f"Error: old_string occurs {count} times in {path}; it must occur exactly once."
        self.files[path] = content.replace(old, new).split("\n")
        return f"Edited {path}: replaced 1 occurrence."

    def _write(self, path: str, content: str) -> str:
        self.files[path] = content.rstrip("\n").split("\n")
        return f"Wrote {len(self.files[path])} lines to {path}."

    def _pytest(self, rng: random.Random) -> str:
        failing = self.open_bugs()
        total = sum(self.passing.values()) + len(self.bugs)
        lines = ["=" * 29 + " test session starts " + "=" * 29, f"collected {total} items", ""]
        for test_path, passed in self.passing.items():
            bugs_here = [b for b in self.bugs if b.test_path == test_path]
            marks = "." * passed + "".join("F" if b in failing else "." for b in bugs_here)
            lines.append(f"{test_path} {marks}")
        seconds = f"{rng.uniform(0.2, 4.0):.2f}s"
        if not failing:
            lines += ["", "=" * 28 + f" {total} passed in {seconds} " + "=" * 28]
            return "\n".join(lines)
        lines += ["", "=" * 35 + " FAILURES " + "=" * 35]
        for bug in failing:
            number = bug.line_number(self.files[bug.path])
            lines += [
                "_" * 20 + f" {bug.test_name} " + "_" * 20,
                "",
                f"    def {bug.test_name}():",
                f">       {bug.assertion}",
                f"E       {bug.message}",
                "",
                f"{bug.test_path}:{bug.test_line}: AssertionError",
                f"    (called {bug.function} in {bug.path}:{number})",
            ]
        lines += ["=" * 30 + " short test summary info " + "=" * 30]
        lines += [f"FAILED {b.test_path}::{b.test_name} - {b.message}" for b in failing]
        lines.append(f"{len(failing)} failed, {total - len(failing)} passed in {seconds}")
        return "\n".join(lines)

    def _diff(self) -> str:
        out: list[str] = []
        for path, lines in self.files.items():
            before = self.original.get(path, [])
            if lines != before:
                out += difflib.unified_diff(before, lines, f"a/{path}", f"b/{path}", lineterm="", n=2)
        return "\n".join(out)
