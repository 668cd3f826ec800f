"""The sink interface: where a run's finished sessions go, one format a module.

    table = session_table(result)        # one session's samples, SPEC §5 columns (samples.py)
    sink = open_sink("slime", out, context)
    sink.add(table) ...                  # sessions in session-id order
    staged = sink.close()                # everything written to temporaries, nothing published
    publish([*staged, rejects.close()])  # all the run's files appear together (tito_cli._atomic)

Both runners (``run/local.py``, ``run/ray_data.py``) and ``tito export``
hand a sink the same per-session tables.  A format is one module in this
package that defines ``SINK``, a :class:`Sink` subclass; the module's name
is the format's name on the command line (``--format``, ``--to``).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pyarrow as pa

from .._atomic import StagedFile
from .._targets import check_target
from ..algorithm.policy import Policy, default_policy
from ..errors import ExportError

__all__ = [
    "ExportOptions",
    "Sink",
    "SinkContext",
    "format_names",
    "open_sink",
]

#: What ``--to slime`` does with a session that forked into several samples (docs/export.md).
ForkedChoice = Literal["keep", "leaf", "regroup"]
#: What ``--to slime`` does with rollout logprobs (slime uses them for all samples or none).
LogprobsChoice = Literal["auto", "keep", "drop"]


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """The format options; each sink reads those of its format (see docs/export.md)."""

    #: slime: one file per this many groups (``--out`` then holds ``{rollout_id}``).
    split_by: int | None = None
    #: slime: a session that forked into several samples.
    forked: ForkedChoice = "keep"
    #: slime: rollout logprobs.
    logprobs: LogprobsChoice = "auto"
    #: trl: also write ``labels`` (-100 where masked).
    labels: bool = False

    @property
    def out_pattern(self) -> str | None:
        """The placeholder ``--out`` holds, one file per value (slime's ``--split-by``), if any."""
        return "{rollout_id}" if self.split_by is not None else None


@dataclass(frozen=True, slots=True)
class SinkContext:
    """What a sink may need besides the tables: how they were made, and the user's choices."""

    policy: Policy = field(default_factory=default_policy)
    tokenizer: str | None = None
    options: ExportOptions = field(default_factory=ExportOptions)
    overwrite: bool = False


class Sink(ABC):
    """Receives finished sessions' sample tables (in session-id order) and writes one format.

    Nothing appears at ``out`` until the caller publishes what :meth:`close`
    staged, together with the run's other files; :meth:`abort` drops every
    temporary and leaves previous outputs untouched.
    """

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


#: A format module's sink, as it is written at the top level of the module.
_DEFINES_SINK = re.compile(r"^SINK\s*(:[^=]*)?=", re.MULTILINE)


def format_names() -> list[str]:
    """The output formats: the public modules of this package that define ``SINK``.

    Found by reading the modules' text, not by importing them: the command
    line lists the formats at start-up, and a format's imports (pyarrow's
    Parquet writer, torch) are paid only by the run that writes it.  Other
    modules here (the rejects report, group counts, the turn-log exporter of
    ``tito export-exchanges``) are not sample sinks.
    """
    folder = Path(__file__).parent
    names = []
    for module in pkgutil.iter_modules([str(folder)]):
        if module.name.startswith("_") or module.ispkg:
            continue
        if _DEFINES_SINK.search((folder / f"{module.name}.py").read_text(encoding="utf-8")):
            names.append(module.name)
    return sorted(names)


def open_sink(name: str, out: Path, context: SinkContext) -> Sink:
    """The sink of format ``name`` (a module of this package), writing ``out``."""
    if name not in format_names():
        raise ExportError(f"unknown output format {name!r}", tip=f"one of: {', '.join(format_names())}")
    module = importlib.import_module(f"{__package__}.{name}")
    sink_class: type[Sink] = module.SINK
    return sink_class(out, context)
