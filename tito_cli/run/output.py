"""A run's output files, handled in one place: checked, swept, written through a sink, published together.

    output = RunOutput(out, overwrite=False, rejects_file=rejects_path(out), reads=inputs, found=files)
    output.sweep()                                     # a killed earlier run's temporaries removed
    sink = output.open_sink("slime", context)          # the format's sink (export/formats.py)
    ... sink.add(table) ...
    output.publish(sink, rejects)                      # the sink's files and the rejects report, or neither

``rebuild`` (every runner, ``--from`` too) and ``export`` write through this:
the targets go through the one check every command that writes makes
(``tito_cli/_targets.py``: ``overwrite``, never an input, never a special
file, through a ``{rollout_id}`` pattern too), nothing appears until
everything is written, and an ``OSError`` of the output is an
:class:`~tito_cli.errors.OutputError` naming it (``_targets.writing``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pyarrow as pa

from .._atomic import StagedFile, publish, remove_stale_temporaries
from .._targets import check_target, writing
from ..export.base import Sink, SinkContext
from ..export.formats import open_sink
from ..export.rejects import RejectsReport

__all__ = ["RunOutput", "check_outputs"]


def check_outputs(
    out: Path,
    *,
    overwrite: bool,
    rejects_file: Path | None = None,
    reads: Iterable[str | os.PathLike[str]] = (),
    found: Iterable[Path] = (),
    pattern: str | None = None,
) -> None:
    """Refuse targets that cannot be written, before anything is read: ``out`` (replaced only with
    ``overwrite``; ``pattern``: the placeholder its name holds, one file per value) and the rejects
    report beside it (always replaced: it belongs to ``out``); neither may be one of ``reads`` (the
    paths given) or ``found`` (the files found under them)."""
    found = list(found)
    check_target(out, overwrite=overwrite, reads=reads, found=found, pattern=pattern)
    if rejects_file is not None:
        check_target(rejects_file, overwrite=True, reads=reads, found=found)


class RunOutput:
    """The files one run writes: ``out`` through a sink, and, for a rebuild, its rejects report."""

    def __init__(
        self,
        out: Path,
        *,
        overwrite: bool,
        rejects_file: Path | None = None,
        reads: Iterable[str | os.PathLike[str]] = (),
        found: Iterable[Path] = (),
        pattern: str | None = None,
    ) -> None:
        reads = list(reads)
        check_outputs(out, overwrite=overwrite, rejects_file=rejects_file, reads=reads, found=found, pattern=pattern)
        self.out = out
        self.overwrite = overwrite
        self.rejects_file = rejects_file

    @property
    def targets(self) -> list[Path]:
        """The files this run may replace."""
        return [self.out] if self.rejects_file is None else [self.out, self.rejects_file]

    def sweep(self) -> list[Path]:
        """Remove the temporaries of a run that was killed (SIGKILL, OOM) before it could clean up."""
        return [path for target in self.targets for path in remove_stale_temporaries(target)]

    def open_sink(self, output_format: str, context: SinkContext) -> Sink:
        """The sink of ``output_format`` writing ``out``."""
        with writing(self.out):
            return open_sink(output_format, self.out, context)

    def add(self, sink: Sink, table: pa.Table) -> None:
        """One session's table into ``sink`` (an ``OSError`` is the output's: exit 5 naming it)."""
        with writing(self.out):
            sink.add(table)

    def publish(self, sink: Sink, rejects: list[dict[str, object]] | None = None) -> None:
        """Publish the sink's files (and, for a rebuild, the rejects report) together, or neither.

        Everything is written to temporaries first: a failure anywhere (the sink's last
        write, the rejects report) leaves the previous run's files as they were, never
        new samples beside an old rejects report.
        """
        report = RejectsReport(self.rejects_file) if self.rejects_file is not None else None
        try:
            with writing(self.out):
                staged: list[StagedFile] = sink.close()
                if report is not None:
                    staged.append(report.close(rejects or []))
                publish(staged)
        except BaseException:
            sink.abort()
            if report is not None:
                report.abort()
            raise
