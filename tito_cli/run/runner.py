"""The runner seam: who rebuilds a log's sessions (this machine's processes, a Ray cluster), behind one interface.

    with RUNNERS.get("local")(options).open(files, unfinished, spill_dir) as opened:
        opened.tokenizer, opened.session_ids(), opened.sessions_table
        for output in opened.outputs(policy, count_drift):
            ...   # SessionOutput or Reject, in session-id order

A runner only rebuilds: :func:`tito_cli.run.rebuild.rebuild` checks the
outputs, sweeps a killed run's temporaries, opens the sink, hands it each
session's table and publishes, whichever runner made them, so every runner
writes the same files.  Runners are plug-ins (tito_cli/plugins.py): each
carries ``name`` (``--engine``), ``summary`` and ``Options`` (``--workers``
and ``--batch-mb`` are the local runner's; the command line refuses them for
another runner rather than ignore them).
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, Protocol

from ..algorithm.policy import Policy
from ..plugins import PluginTable
from ..read.files import LogFile
from ..read.sessions import SessionsTable
from ..turns import Reject
from .corpus import SessionFacts, SessionOutput, Unfinished

__all__ = ["RUNNERS", "OpenedLog", "Runner"]


class OpenedLog(Protocol):
    """A log as a runner opened it: what the summary and the sink need, and the sessions' outputs."""

    @property
    def tokenizer(self) -> str | None:
        """The tokenizer the log records."""

    @property
    def sessions_table(self) -> SessionsTable:
        """The log's sessions rows, and the unusable ones."""

    @property
    def log_files(self) -> list[LogFile]:
        """The log's files (turns and sessions tables) as found and classified."""

    @property
    def workers_capped(self) -> tuple[int, int] | None:
        """``(asked, used)`` when the runner lowered a worker count it was given."""

    def session_ids(self) -> Sequence[str]:
        """The sessions with turns, in session-id order."""

    def outputs(self, policy: Policy, count_drift: SessionFacts | None) -> Iterator[SessionOutput | Reject]:
        """Each session's output or rejection, in session-id order."""


class Runner(ABC):
    """Rebuilds the sessions of a log's files; ``options`` is an instance of the runner's ``Options``."""

    name: ClassVar[str]
    summary: ClassVar[str]
    Options: ClassVar[type[Any]]

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def open(
        self, files: list[Path], unfinished: Unfinished, spill_dir: Path
    ) -> contextlib.AbstractContextManager[OpenedLog]:
        """Open the log's ``files`` (``spill_dir``: where parked outputs may spill, beside the output)."""


#: ``--engine`` name -> runner class, imported when used (Ray only by the run that asks for it).
RUNNERS: PluginTable[Runner] = PluginTable(
    "engine",
    {
        "local": "tito_cli.run.local:LocalRunner",
        "ray": "tito_cli.run.ray_data:RayRunner",
    },
    base=Runner,
)
