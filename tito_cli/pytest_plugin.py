"""pytest plugin: check a turn log against golden dumps inside your own test suite.

Installed with tito (entry point ``pytest11``), it adds the ``tito_golden``
fixture and the ``--tito-update`` option::

    def test_agent_samples(tito_golden):
        tito_golden.check("tests/logs", "tests/golden", policy="slime-v4", fork_threshold=1024)

The test fails with a ``-golden`` / ``+rebuilt`` diff when a dump changed,
and also when a session has no dump or a dump has no session.  Dumps are
written only when pytest runs with ``--tito-update`` (never because of an
environment variable, so never by accident on CI); the updated files are
listed at the end of the run.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterable, Sequence

import pytest

from .algorithm.policy import DEFAULT_FORK_THRESHOLD, DEFAULT_POLICY, Policy, RewardMode
from .golden.compare import CheckReport, GoldenOptions, check_goldens
from .golden.report import render_check_report
from .golden.serialize import DumpStyle

__all__ = ["TitoGolden"]

_UPDATED = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("tito", "tito golden dumps")
    group.addoption(
        "--tito-update",
        action="store_true",
        default=False,
        help="Accept rebuilt tito golden dumps: write new and changed ones, remove stale ones.",
    )


def _pytest_command() -> str:
    # "python -m pytest" runs pytest/__main__.py; anything else was the pytest script.
    return "python -m pytest" if sys.argv and sys.argv[0].endswith("__main__.py") else "pytest"


class TitoGolden:
    """What the ``tito_golden`` fixture returns: one :meth:`check` per log folder."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self.update: bool = bool(request.config.getoption("tito_update"))
        self._request = request

    def check(
        self,
        logs: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        golden: str | os.PathLike[str],
        *,
        policy: str | Policy = DEFAULT_POLICY,
        fork_threshold: int = DEFAULT_FORK_THRESHOLD,
        reward_mode: RewardMode | None = None,
        max_sample_tokens: int | None = None,
        style: DumpStyle = "full",
        tokenizer: str | os.PathLike[str] | None = None,
        decode: bool = True,
        sessions: Sequence[str] | None = None,
        diff_lines: int = 200,
    ) -> CheckReport:
        """Rebuild ``logs`` and compare each session's dump with ``golden/<session>.txt``; fail on any difference.

        ``policy`` is a policy's name (the other knobs apply to it, as on the
        command line: ``--policy``, ``--fork-threshold``, ``--reward-mode``,
        ``--max-sample-tokens``) or a :class:`~tito_cli.algorithm.policy.Policy` value (used as it is).
        """
        inputs = [logs] if isinstance(logs, (str, os.PathLike)) else list(logs)
        if not isinstance(policy, Policy):
            policy = Policy.named(
                policy, fork_threshold=fork_threshold, reward_mode=reward_mode, max_sample_tokens=max_sample_tokens
            )
        options = GoldenOptions(
            policy=policy,
            style=style,
            tokenizer=tokenizer,
            decode=decode,
        )
        report = check_goldens(inputs, golden, options, sessions, update=self.update)
        if report.updated:
            updated = self._request.config.stash.setdefault(_UPDATED, [])
            updated.extend(f"{c.status.value}: {c.file}" for c in report.failures)
        if not report.ok:
            accept = f"{_pytest_command()} {shlex.quote(self._request.node.nodeid)} --tito-update"
            text = render_check_report(report, diff_lines=diff_lines, accept_command=accept).plain
            pytest.fail(text, pytrace=False)
        return report


@pytest.fixture
def tito_golden(request: pytest.FixtureRequest) -> TitoGolden:
    """Assert turn logs against golden dump folders (see :class:`TitoGolden`)."""
    return TitoGolden(request)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    updated = config.stash.get(_UPDATED, [])
    if updated:
        terminalreporter.write_sep("-", f"tito golden dumps updated ({len(updated)})")
        for line in updated:
            terminalreporter.write_line(line)
