"""``tito import`` and ``tito export-exchanges``: traces of other capture systems in, a turn log out (and back)."""

from __future__ import annotations

from pathlib import Path

import typer

from ..capture.importers import IMPORTERS
from ..errors import EXIT_OK, EXIT_REJECTED
from ..plugins import options_help
from ..render.visible import session_line
from .app import EXIT_CODES_HELP, app, err_console, guarded
from .options import plugin_choice

__all__ = [
    "FORMAT_CHOICE",
    "REWARDS_HELP",
    "SESSION_HEADER_HELP",
    "TOKENIZER_HELP",
    "VERBATIM_HELP",
    "check_import_options",
]

#: ``tito import FORMAT``, ``rebuild --from FORMAT``: the importers' table, read when the command runs.
FORMAT_CHOICE = plugin_choice(IMPORTERS)

FORMATS_HELP = (
    "FORMAT: "
    + " ".join(f"'{name}': {summary}" for name, summary in IMPORTERS.summaries().items())
    + " See docs/import.md."
)


def _option_help(option: str) -> str:
    """An importer option's help, from the classes: the formats that have it, then its field's help."""
    owners = IMPORTERS.option_owners()[option]
    return f"{', '.join(owners)}: {options_help(IMPORTERS.get(owners[0]).Options)[option]}"


def check_import_options(format: str, session_header: str | None) -> None:
    """Refuse an importer option the format does not have, rather than ignore it."""
    if session_header is not None and "session_header" not in options_help(IMPORTERS.get(format).Options):
        owners = ", ".join(IMPORTERS.option_owners()["session_header"])
        raise typer.BadParameter(f"applies to the {owners} format only, not {format}", param_hint="--session-header")


REWARDS_HELP = (
    "JSONL of session_id, reward and optional index, group_index, label, metadata, rollout_id: the sessions rows "
    "for formats whose source holds no reward."
)
SESSION_HEADER_HELP = _option_help("session_header")
TOKENIZER_HELP = "Tokenizer name or path recorded in the log (tito.tokenizer), for commands that decode."
VERBATIM_HELP = (
    ", ".join(name for name in IMPORTERS.names() if IMPORTERS.get(name).server_responses)
    + ": keep each response message exactly as the server serialised it, "
    "instead of the equal message (null fields dropped) the harness sent back in a later prompt."
)


@app.command(
    "import",
    help="Convert another capture system's traces into a tito turn log, reporting per session what the "
    "source lacked and how it was filled; sessions that cannot be mapped are rejected (file, line or row, "
    "reason) and everything else is written.\n\n" + FORMATS_HELP + "\n\n" + EXIT_CODES_HELP,
)
@guarded
def import_command(
    format: str = typer.Argument(..., click_type=FORMAT_CHOICE, help="The source format (see above)."),
    sources: list[Path] = typer.Argument(..., help="The source files or folders."),
    out: Path = typer.Option(..., "--out", "-o", help="The turn-log folder to write."),
    rewards: Path = typer.Option(None, "--rewards", help=REWARDS_HELP),
    tokenizer: str = typer.Option(None, "--tokenizer", help=TOKENIZER_HELP),
    session_header: str = typer.Option(None, "--session-header", help=SESSION_HEADER_HELP),
    verbatim_responses: bool = typer.Option(False, "--verbatim-responses", help=VERBATIM_HELP),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace the log already in the output folder."),
) -> None:
    from ..capture.importing import import_traces
    from ..render.import_summary import render_import_summary

    check_import_options(format, session_header)
    summary = import_traces(
        format,
        sources,
        out,
        rewards=rewards,
        tokenizer=tokenizer,
        session_header=session_header,
        align_responses=not verbatim_responses,
        overwrite=overwrite,
    )
    err_console.print(render_import_summary(summary), soft_wrap=True)
    raise typer.Exit(EXIT_REJECTED if summary.rejected else EXIT_OK)


@app.command(
    "export-exchanges",
    help="Write a turn log as openai-exchanges JSONL (vLLM's response shape), and its sessions table as a "
    "rewards file: 'tito import openai-exchanges' of both gives back a log that rebuilds to the same samples."
    "\n\n" + EXIT_CODES_HELP,
)
@guarded
def export_exchanges_command(
    logs: list[Path] = typer.Argument(..., help="Turn-log folders or Parquet files."),
    out: Path = typer.Option(..., "--out", "-o", help="The exchanges JSONL file to write."),
    rewards_out: Path = typer.Option(None, "--rewards-out", help="Also write the sessions table as a rewards file."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace existing output files."),
) -> None:
    from ..export.openai_exchanges import export_exchanges

    result = export_exchanges(logs, out, rewards_out=rewards_out, overwrite=overwrite)
    err_console.print(f"exported {result.sessions:,} sessions, {result.turns:,} turns to {out}", soft_wrap=True)
    if rewards_out is not None:
        err_console.print(f"wrote {result.rewards:,} rewards to {rewards_out}", soft_wrap=True)
    for reject in result.rejected:
        line = session_line(f"left out {reject.session_id}", f"{reject.reason} [{reject.file}]")
        err_console.print(line, soft_wrap=True, markup=False)
    raise typer.Exit(EXIT_REJECTED if result.rejected else EXIT_OK)
