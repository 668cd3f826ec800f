"""``tito export``: a samples file in a trainer's format; the format options ``tito rebuild --format`` shares."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..errors import EXIT_OK
from ..export.base import ExportOptions, format_names
from ..render.summary import render_export_summary
from ..run.export import export_samples
from .app import EXIT_CODES_HELP, app, err_console, guarded

__all__ = ["FORKED", "LABELS", "LOGPROBS", "SPLIT_BY", "check_format", "export_options"]


class ForkedChoice(Enum):
    keep = "keep"
    leaf = "leaf"
    regroup = "regroup"


class LogprobsChoice(Enum):
    auto = "auto"
    keep = "keep"
    drop = "drop"


#: The trainer formats (modules of tito_cli/export/ other than the samples file itself).
TRAINER_FORMATS = [name for name in format_names() if name != "parquet"]

SPLIT_BY = typer.Option(
    None,
    "--split-by",
    min=1,
    help="slime: one rollout dump per N groups (a group is never split), named by the {rollout_id} "
    "pattern in --out (0, 1, …), as slime's --load-debug-rollout-data formats it.",
)
FORKED = typer.Option(
    ForkedChoice.keep,
    "--forked",
    help="slime, a session that forked into several samples: 'keep' them all and warn that "
    "n_samples_per_prompt no longer holds for its group; 'leaf' keeps only the sample that ends the "
    "session (with the session's whole reward); 'regroup' keeps all and records each sample's group "
    "in metadata['tito']['group'] for a custom reward post-process.",
)
LOGPROBS = typer.Option(
    LogprobsChoice.auto,
    "--logprobs",
    help="slime, rollout logprobs (used for every sample or none): 'auto' writes them when every sample "
    "has them, none when none has, and stops when only some have; 'keep' writes them as they are "
    "(0.0 where none were recorded); 'drop' writes none.",
)
LABELS = typer.Option(
    False, "--labels", help="trl: also write a 'labels' column (the token where trained, -100 elsewhere)."
)


def export_options(
    format: str, split_by: int | None, forked: ForkedChoice, logprobs: LogprobsChoice, labels: bool
) -> ExportOptions:
    """The format options, refusing those the format does not read (rather than ignoring them)."""
    given = {
        "--split-by": (split_by is not None, "slime"),
        "--forked": (forked is not ForkedChoice.keep, "slime"),
        "--logprobs": (logprobs is not LogprobsChoice.auto, "slime"),
        "--labels": (labels, "trl"),
    }
    for option, (set_, owner) in given.items():
        if set_ and format != owner:
            raise typer.BadParameter(f"applies to the {owner} format only, not {format}", param_hint=option)
    return ExportOptions(split_by=split_by, forked=forked.value, logprobs=logprobs.value, labels=labels)


def check_format(name: str, known: list[str], option: str) -> str:
    if name not in known:
        raise typer.BadParameter(f"{name!r} is not one of {', '.join(known)}", param_hint=option)
    return name


@app.command(
    "export",
    help="Write a samples file in a trainer's format: 'slime' rollout dumps (torch, for "
    "--load-debug-rollout-data), 'skyrl' or 'trl' pretokenized Parquet. Reports, per group_index, "
    "groups whose sample count is not their session count. See docs/export.md.\n\n" + EXIT_CODES_HELP,
)
@guarded
def export(
    samples: Path = typer.Argument(..., help="The samples Parquet file (from tito rebuild)."),
    to: str = typer.Option(..., "--to", help=f"The trainer format: {', '.join(TRAINER_FORMATS)}."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="The file to write (for slime with --split-by, a pattern holding {rollout_id})."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files."),
    split_by: int = SPLIT_BY,
    forked: ForkedChoice = FORKED,
    logprobs: LogprobsChoice = LOGPROBS,
    labels: bool = LABELS,
) -> None:
    check_format(to, TRAINER_FORMATS, "--to")
    options = export_options(to, split_by, forked, logprobs, labels)
    summary = export_samples(samples, out, to, options, overwrite=overwrite)
    err_console.print(render_export_summary(summary), soft_wrap=True)
    raise typer.Exit(EXIT_OK)
