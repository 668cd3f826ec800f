"""The agents' policies: what a coding agent decides to do next, as a script.

:class:`MainAgent` works a bug-fixing task the way coding agents do: look at
the layout, run the tests, read the failing code (often several files in one
turn of parallel tool calls), maybe hand an investigation to a sub-agent,
fix the code with a small edit or by rewriting the whole file, run the tests
again, and report.  :class:`SubAgent` does a short read-only investigation
and reports back.  Both are generators of :class:`~.model.Action`; the value
sent back in is the finish reason of the previous reply, so that an agent cut
off at ``length`` can take a smaller step.
"""

from __future__ import annotations

import random
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from .environment import Bug, Workspace
from .model import Action
from .text import TextGen

__all__ = ["MainAgent", "Plan", "Style", "SubAgent"]

#: A plan yields actions and is sent the previous reply's finish reason.
Plan = Generator[Action, "str | None", None]


@dataclass(frozen=True, slots=True)
class Style:
    """Habits of the model in one session."""

    #: Chance that a reply starts with reasoning (the first reply always does when > 0).
    reasoning: float = 0.0
    #: Chance that prose before tool calls ends with a newline (clients that strip it re-render the message).
    trailing_newline: float = 0.0
    #: Chance of batching independent tool calls into one reply.
    parallel: float = 0.5
    #: Fix the first bug by rewriting its whole (long) file instead of a one-line edit.
    long_write: bool = False
    #: Get the first fix wrong once, and notice it from the tests.
    wrong_fix: bool = False
    #: Get the last fix wrong and give up on it (the session fails).
    give_up: bool = False
    #: Start a background sub-agent to look for callers of the first buggy function.
    subagent: bool = False
    #: Extra exploration steps per bug (reads, greps), inclusive range.
    extra_reads: tuple[int, int] = (0, 1)


def _call(name: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    return name, arguments


class _Writer:
    """Shared helpers: prose with the model's habits applied."""

    def __init__(self, workspace: Workspace, rng: random.Random, style: Style) -> None:
        self.ws = workspace
        self.rng = rng
        self.text = TextGen(rng)
        self.style = style
        self.turns = 0

    def act(self, content: str, calls: list[tuple[str, dict[str, Any]]], reasoning: str | None = None) -> Action:
        think = None
        if self.style.reasoning > 0 and (self.turns == 0 or self.rng.random() < self.style.reasoning):
            think = reasoning or self.thought()
        if calls and content and self.rng.random() < self.style.trailing_newline:
            content += "\n"
        self.turns += 1
        return Action(content=content, calls=calls, reasoning=think)

    def thought(self) -> str:
        return self.text.filler(self.rng.randint(2, 5))

    def other_files(self, exclude: set[str]) -> list[str]:
        return [p for p in self.ws.files if p.endswith(".py") and p not in exclude]


class MainAgent(_Writer):
    """The main coding agent: fixes every planted bug, one after the other."""

    def plan(self) -> Plan:
        ws, rng = self.ws, self.rng
        first_bug = ws.bugs[0] if ws.bugs else None
        yield self.act(
            "I'll start by looking at the repository layout.",
            [_call("bash", command="find . -name '*.py' | sort")],
            reasoning=f"The task is about failing tests in {ws.project}. {self.thought()} "
            "First I need to know which modules exist and what the tests cover.",
        )
        yield self.act("Let me run the test suite to see what fails.", [_call("bash", command="python -m pytest -q")])
        read: set[str] = set()
        for number, bug in enumerate(ws.bugs):
            yield from self._investigate(bug, read, delegate=self.style.subagent and bug is first_bug)
            yield from self._fix(bug, first=bug is first_bug, last=number == len(ws.bugs) - 1)
            if not ws.fixed(bug) and self.style.give_up:
                yield self.act(
                    f"I could not get `{bug.test_name}` to pass: my change to `{bug.function}` did not fix it. "
                    f"{self.text.sentence()} The remaining failure needs someone who knows the intended behaviour.",
                    [],
                )
                return
            if number == len(ws.bugs) - 1 or rng.random() < 0.5:
                yield self.act("Let me run the tests again.", [_call("bash", command="python -m pytest -q")])
        if rng.random() < 0.5:
            yield self.act("Let me review the full diff.", [_call("bash", command="git diff")])
        fixes = "; ".join(f"`{b.function}` in `{b.path}`" for b in ws.bugs)
        yield self.act(
            f"All tests pass now. I fixed {fixes}.\n\n"
            + "\n".join(f"- `{b.function}`: `{b.wrong.strip()}` became `{b.right.strip()}`." for b in ws.bugs)
            + f"\n\n{self.text.sentence()}",
            [],
        )

    def answer_followup(self) -> Action:
        """The reply to the user's follow-up question after the task (no tools needed)."""
        ws = self.ws
        causes = "; ".join(f"`{b.function}` used `{b.wrong.strip()}`" for b in ws.bugs) or "nothing was broken"
        return self.act(
            f"The root cause: {causes}. {self.text.sentence()}",
            [],
            reasoning=f"The user wants the root cause in one sentence. {self.thought()}",
        )

    def summary(self, task: str) -> str:
        """What the agent writes when the harness asks it to compact the conversation."""
        ws = self.ws
        remaining = ws.open_bugs()
        lines = ["## Task", task, "", "## Progress", "- Listed the repository and ran the test suite."]
        lines += [f"- Fixed `{b.function}` in `{b.path}`." for b in ws.bugs if ws.fixed(b)]
        lines += [
            f"- `{b.test_name}` still fails ({b.message}); `{b.function}` in `{b.path}` is the suspect."
            for b in remaining
        ]
        lines += ["", "## Next"]
        lines.append(
            "- Fix the remaining failures, then run `python -m pytest -q`."
            if remaining
            else "- Run the tests once more and report."
        )
        return "\n".join(lines)

    def _investigate(self, bug: Bug, read: set[str], *, delegate: bool) -> Plan:
        rng = self.rng
        where = f"`{bug.function}` in `{bug.path}`"
        content = f"`{bug.test_name}` fails: {bug.message.removeprefix('assert ')}. Let me read {where} and its test."
        if rng.random() < self.style.parallel:
            yield self.act(content, [_call("read_file", path=bug.path), _call("read_file", path=bug.test_path)])
        else:
            yield self.act(content, [_call("read_file", path=bug.path)])
            yield self.act("Now the test.", [_call("read_file", path=bug.test_path)])
        read |= {bug.path, bug.test_path}
        if delegate:
            prompt = (
                f"In the repository `{self.ws.project}`, find every caller of `{bug.function}` (defined in "
                f"`{bug.path}`) and tell me whether any of them relies on its current return value. "
                "Only read files; do not change anything. Report the callers with file and line."
            )
            yield self.act(
                "I'll have a sub-agent check the callers while I keep reading.",
                [_call("task", description=f"Find callers of {bug.function}", prompt=prompt)],
            )
        for _ in range(rng.randint(*self.style.extra_reads)):
            others = self.other_files(read)
            if others and rng.random() < 0.6:
                batch = rng.sample(others, min(len(others), 1 + int(rng.random() < self.style.parallel)))
                read |= set(batch)
                yield self.act(
                    f"Let me also look at {' and '.join(f'`{p}`' for p in batch)}.",
                    [_call("read_file", path=p) for p in batch],
                )
            else:
                yield self.act(
                    f"Let me check where `{bug.function}` is used.",
                    [_call("grep", pattern=bug.function, path="src")],
                )
        if delegate:
            yield self.act("Let me get the sub-agent's report.", [_call("agent_output", agent_id="agent-1")])

    def _fix(self, bug: Bug, *, first: bool, last: bool) -> Plan:
        why = f"The line `{bug.wrong.strip()}` is wrong; it should be `{bug.right.strip()}`."
        if (first and self.style.wrong_fix) or (last and self.style.give_up):
            wrong = bug.wrong.replace("(", "( ", 1) if "(" in bug.wrong else bug.wrong + "  # checked"
            yield self.act(
                f"{why.split(';')[0]}. Let me adjust it.",
                [_call("edit_file", path=bug.path, old_string=bug.wrong, new_string=wrong)],
            )
            yield self.act("Let me run that test.", [_call("bash", command=f"python -m pytest -q {bug.test_path}")])
            if last and self.style.give_up:
                return
            bug_line = wrong
            why = f"My edit did not change the behaviour. {why}"
        else:
            bug_line = bug.wrong
        if first and self.style.long_write:
            content = self.ws.replaced(bug.path, bug_line, bug.right)
            finish = yield self.act(
                f"{why} I'll rewrite `{bug.path}` with the fix and tidy it up while I'm there.",
                [_call("write_file", path=bug.path, content=content)],
            )
            if finish != "length":
                return
            why = "The file was too long to write in one reply; a targeted edit is enough."
        yield self.act(why, [_call("edit_file", path=bug.path, old_string=bug_line, new_string=bug.right)])


class SubAgent(_Writer):
    """A read-only investigator started through the ``task`` tool."""

    def __init__(self, workspace: Workspace, rng: random.Random, style: Style, bug: Bug) -> None:
        super().__init__(workspace, rng, style)
        self.bug = bug

    def plan(self) -> Plan:
        bug, rng = self.bug, self.rng
        yield self.act(f"I'll search for `{bug.function}`.", [_call("grep", pattern=bug.function, path=".")])
        callers = [p for p, lines in self.ws.files.items() if p != bug.path and any(bug.function in s for s in lines)]
        for path in callers[: rng.randint(1, 2)]:
            yield self.act(f"Reading `{path}`.", [_call("read_file", path=path)])
        found = "\n".join(f"- `{p}`" for p in callers) or "- none outside its own module"
        yield self.act(
            f"Callers of `{bug.function}`:\n{found}\n\nNone of them depends on the current return value; "
            f"the only direct check is `{bug.test_name}`. {self.text.sentence()}",
            [],
        )
