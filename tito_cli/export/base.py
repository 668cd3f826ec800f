"""The sink interface: where a run's finished sessions go, one format a module.

    table = session_table(result)        # one session's samples, SPEC §5 columns (samples.py)
    sink = open_sink("slime", out, context)   # export/formats.py: the table of formats
    sink.add(table) ...                  # sessions in session-id order
    staged = sink.close()                # everything written to temporaries, nothing published
    publish([*staged, rejects.close()])  # all the run's files appear together (tito_cli._atomic)

Every rebuild (either runner) and ``tito export`` hand a sink the same
per-session tables.  A format is one module in this package with a
:class:`Sink` subclass carrying ``name`` (``--format``, ``--to``),
``summary`` and its own ``Options`` dataclass, and one line in
``export/formats.py``'s table.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa

from .._atomic import StagedFile
from .._targets import check_target
from ..algorithm.policy import Policy, default_policy

__all__ = [
    "NoOptions",
    "Sink",
    "SinkContext",
]


@dataclass(frozen=True, slots=True)
class NoOptions:
    """The options of a format that has none.

    A format whose ``--out`` may hold a placeholder (one file per value: slime's ``{rollout_id}``)
    gives its options an ``out_pattern`` property; the one target check then checks every file
    the pattern names.
    """


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What a sink may need besides the tables: how they were made, and the user's choices.

    ``options`` is an instance of the sink's own ``Options`` dataclass (``None``: its defaults);
    ``open_sink`` (export/formats.py) checks it, so a sink reads its options from here typed.
    """

    policy: Policy = field(default_factory=default_policy)
    tokenizer: str | None = None
    options: Any = None
    overwrite: bool = False


class Sink(ABC):
    """Receives finished sessions' sample tables (in session-id order) and writes one format.

    Nothing appears at ``out`` until the caller publishes what :meth:`close`
    staged, together with the run's other files; :meth:`abort` drops every
    temporary and leaves previous outputs untouched.

    A format is a subclass carrying ``name`` (``--format``, ``--to``), a one-line
    ``summary`` and, when it has options, its own ``Options`` dataclass whose fields'
    ``metadata["help"]`` the command line shows (``--split-by`` is the field ``split_by``).
    """

    #: The format's name on the command line and in ``rebuild(output_format=...)``.
    name: ClassVar[str]
    #: One line for help texts and docs.
    summary: ClassVar[str]
    #: What of the samples the format does not hold, said once per export (``""``: it holds everything).
    leaves_out: ClassVar[str] = ""
    #: The format's options (a dataclass); a format without options keeps :class:`NoOptions`.
    Options: ClassVar[type[Any]] = NoOptions

    def __init__(self, out: Path, context: SinkContext) -> None:
        self.out = out
        self.context = context
        #: Samples written (after ``close``).
        self.samples_written = 0
        #: The files this sink wrote (after ``close``), in order.
        self.files: list[Path] = []
        #: Things the user should know about the written output (after ``close``).
        self.warnings: list[str] = []

    @abstractmethod
    def add(self, table: pa.Table) -> None:
        """One session's sample rows (``session_table``'s columns; possibly none)."""

    @abstractmethod
    def close(self) -> list[StagedFile]:
        """Write everything to temporaries beside the targets; publish nothing."""

    @abstractmethod
    def abort(self) -> None:
        """Drop every temporary; safe after a failed :meth:`close`."""

    def check_target(self, path: Path) -> None:
        """Refuse to replace an existing file without ``overwrite``, and anything but a regular file ever."""
        check_target(path, overwrite=self.context.overwrite)
