"""``tito export``: a samples file in a trainer's format; the format options ``tito rebuild --format`` shares."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from enum import Enum
from pathlib import Path

import typer

from ..errors import EXIT_OK
from ..export.formats import OUTPUT_FORMATS, format_names, format_options
from ..plugins import options_help
from ..render.summary import render_export_summary
from ..run.export import export_samples
from .app import EXIT_CODES_HELP, app, err_console, guarded

__all__ = [
    "FORKED",
    "LABELS",
    "LOGPROBS",
    "SPLIT_BY",
    "check_format",
    "export_options",
    "format_option_values",
    "trainer_formats",
]


class ForkedChoice(Enum):
    keep = "keep"
    leaf = "leaf"
    regroup = "regroup"


class LogprobsChoice(Enum):
    auto = "auto"
    keep = "keep"
    drop = "drop"


def trainer_formats() -> list[str]:
    """The trainer formats: every output format but the samples file itself (registered ones too)."""
    return [name for name in format_names() if name != "parquet"]


def _option_field(option: str) -> dataclasses.Field[object]:
    """The ``Options`` field behind a format option (the first format in the table that has it)."""
    owner = OUTPUT_FORMATS.option_owners()[option][0]
    return next(f for f in dataclasses.fields(OUTPUT_FORMATS.get(owner).Options) if f.name == option)


def _option_help(option: str) -> str:
    """A format option's help, from the classes: the formats that have it, then its field's help."""
    owners = OUTPUT_FORMATS.option_owners()[option]
    return f"{' and '.join(owners)}: {options_help(OUTPUT_FORMATS.get(owners[0]).Options)[option]}"


SPLIT_BY = typer.Option(None, "--split-by", min=1, help=_option_help("split_by"))
FORKED = typer.Option(ForkedChoice.keep, "--forked", help=_option_help("forked"))
LOGPROBS = typer.Option(LogprobsChoice.auto, "--logprobs", help=_option_help("logprobs"))
LABELS = typer.Option(False, "--labels", help=_option_help("labels"))


def format_option_values(
    split_by: int | None, forked: ForkedChoice, logprobs: LogprobsChoice, labels: bool
) -> dict[str, object]:
    """The format options as given on the command line: ``Options`` field -> value."""
    return {"split_by": split_by, "forked": forked.value, "logprobs": logprobs.value, "labels": labels}


def export_options(format: str, given: Mapping[str, object]) -> object:
    """Format ``format``'s ``Options`` from the command line's values, refusing an option set away from
    its default that the format does not have (rather than ignoring it)."""
    own = {f.name for f in dataclasses.fields(OUTPUT_FORMATS.get(format).Options)}
    chosen: dict[str, object] = {}
    for option, value in given.items():
        if value == _option_field(option).default:
            continue
        if option not in own:
            owners = " and ".join(OUTPUT_FORMATS.option_owners()[option])
            hint = "--" + option.replace("_", "-")
            raise typer.BadParameter(f"applies to the {owners} format only, not {format}", param_hint=hint)
        chosen[option] = value
    return format_options(format, chosen)


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
    to: str = typer.Option(..., "--to", help=f"The trainer format: {', '.join(trainer_formats())}."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="The file to write (for slime with --split-by, a pattern holding {rollout_id})."
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files."),
    split_by: int = SPLIT_BY,
    forked: ForkedChoice = FORKED,
    logprobs: LogprobsChoice = LOGPROBS,
    labels: bool = LABELS,
) -> None:
    check_format(to, trainer_formats(), "--to")
    options = export_options(to, format_option_values(split_by, forked, logprobs, labels))
    summary = export_samples(samples, out, to, options, overwrite=overwrite)
    err_console.print(render_export_summary(summary), soft_wrap=True)
    raise typer.Exit(EXIT_OK)
