"""``tito compact``."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import EXIT_OK, EXIT_REJECTED
from ..render.compaction import render_compact_summary
from ..run.compact import compact as compact_log
from .app import EXIT_CODES_HELP, app, err_console, guarded, progress_bar


@app.command(
    help="Rewrite a turn log in format 2, each turn stored against an earlier one (docs/spec.md §9), "
    "or back in format 1. A rebuild of either form writes the same samples.\n\n" + EXIT_CODES_HELP
)
@guarded
def compact(
    logs: list[Path] = typer.Argument(
        ..., help="Turn-log folders or Parquet files; folders are searched recursively for *.parquet."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The folder to write the converted log into."),
    format: int = typer.Option(
        2, "--format", min=1, max=2, help="2: store each turn's new part only; 1: store every prompt whole."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output folder."),
) -> None:
    with progress_bar("compacting", "sessions") as progress:
        summary = compact_log(logs, out, format=format, overwrite=overwrite, progress=progress)
    err_console.print(render_compact_summary(summary), soft_wrap=True, highlight=False, markup=False)
    raise typer.Exit(EXIT_REJECTED if summary.carried else EXIT_OK)
