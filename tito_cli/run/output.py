"""A run's output files, handled in one place: checked, swept, written through a sink, published together.

    output = RunOutput(out, overwrite=False, rejects_file=rejects_path(out))   # targets checked
    output.sweep()                                     # a killed earlier run's temporaries removed
    sink = output.open_sink("slime", context)          # the format's sink (export/formats.py)
    ... sink.add(table) ...
    output.publish(sink, rejects)                      # the sink's files and the rejects report, or neither

``rebuild`` (every runner) and ``export`` write through this, so the rules
are stated once: an existing target needs ``overwrite`` and must be a regular
file, a file of the input is never an output, nothing appears until
everything is written, and an ``OSError`` of the output is an
:class:`~tito_cli.errors.OutputError` naming it.
"""

from __future__ import annotations

from pathlib import Path

from .._atomic import StagedFile, publish, remove_stale_temporaries
from .._paths import check_output_target
from ..errors import OutputError
from ..export.base import Sink, SinkContext
from ..export.formats import open_sink
from ..export.rejects import RejectsReport

__all__ = ["RunOutput", "check_outputs"]


def check_outputs(out: Path, *, overwrite: bool, rejects_file: Path | None = None) -> None:
    """Refuse targets that cannot be written, before anything is read: ``out`` (replaced only with
    ``overwrite``) and the rejects report beside it (always replaced: it belongs to ``out``)."""
    check_output_target(out, overwrite=overwrite)
    if rejects_file is not None:
        check_output_target(rejects_file, overwrite=True)


class RunOutput:
    """The files one run writes: ``out`` through a sink, and, for a rebuild, its rejects report."""

    def __init__(self, out: Path, *, overwrite: bool, rejects_file: Path | None = None) -> None:
        check_outputs(out, overwrite=overwrite, rejects_file=rejects_file)
        self.out = out
        self.overwrite = overwrite
        self.rejects_file = rejects_file

    @property
    def targets(self) -> list[Path]:
        """The files this run may replace (an input among them is left out of the inputs)."""
        return [self.out] if self.rejects_file is None else [self.out, self.rejects_file]

    def sweep(self) -> list[Path]:
        """Remove the temporaries of a run that was killed (SIGKILL, OOM) before it could clean up."""
        return [path for target in self.targets for path in remove_stale_temporaries(target)]

    def open_sink(self, output_format: str, context: SinkContext) -> Sink:
        """The sink of ``output_format`` writing ``out``."""
        try:
            return open_sink(output_format, self.out, context)
        except OSError as exc:
            raise OutputError(f"cannot write ({exc})", file=self.out) from None

    def publish(self, sink: Sink, rejects: list[dict[str, object]] | None = None) -> None:
        """Publish the sink's files (and, for a rebuild, the rejects report) together, or neither.

        Everything is written to temporaries first: a failure anywhere (the sink's last
        write, the rejects report) leaves the previous run's files as they were, never
        new samples beside an old rejects report.
        """
        report = RejectsReport(self.rejects_file) if self.rejects_file is not None else None
        try:
            staged: list[StagedFile] = sink.close()
            if report is not None:
                staged.append(report.close(rejects or []))
            publish(staged)
        except BaseException as exc:
            sink.abort()
            if report is not None:
                report.abort()
            if isinstance(exc, OSError):
                raise OutputError(f"cannot write ({exc})", file=self.out) from None
            raise
