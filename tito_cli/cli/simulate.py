"""``tito simulate``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from .._paths import FIXTURE_TOKENIZER as DEFAULT_TOKENIZER
from ..errors import EXIT_OUTPUT, EXIT_USAGE
from .app import app, err_console, exit_codes_help, guarded, progress_bar


class ProfileChoice(Enum):
    """The simulator's profiles (``tito_cli.simulate.PROFILES``)."""

    demo = "demo"
    swe = "swe"


@app.command(
    help="Simulate coding-agent sessions into a turn log, offline, with a real tokenizer and chat template.\n\n"
    "The sessions contain tool-call loops, sub-agents, compaction, retries, re-rendered history, stripped "
    "reasoning, non-canonical output ids and truncated replies. The same arguments give byte-identical "
    "files.\n\n" + exit_codes_help(EXIT_OUTPUT)
)
@guarded
def simulate(
    out: Path = typer.Option(..., "--out", "-o", help="Folder to write the turn log into (created if missing)."),
    sessions: int = typer.Option(32, "--sessions", "-n", min=0, help="How many sessions to simulate."),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed (and arguments) gives identical files."),
    profile: ProfileChoice = typer.Option(
        ProfileChoice.demo,
        "--profile",
        help="'demo': small sessions of a few thousand tokens; "
        "'swe': long ones (30-60 turns, prompts past 64k tokens) for benchmarks.",
    ),
    tokenizer: str = typer.Option(
        DEFAULT_TOKENIZER,
        "--tokenizer",
        help="Tokenizer folder (with a chat template) to render and tokenize with; recorded in the log. "
        "The default is the one shipped in the repository.",
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Replace the Parquet files already in --out (once the new log is complete: a failed run keeps them).",
    ),
) -> None:
    # The simulator (and transformers, through it) is imported only when simulating.
    from ..render.simulation import render_simulation_summary
    from ..simulate import resolve_tokenizer
    from ..simulate import simulate as run_simulation

    if not Path(resolve_tokenizer(tokenizer)).is_dir():
        err_console.print(f"[bold red]ERROR[/] --tokenizer {tokenizer}: no such folder", soft_wrap=True)
        raise typer.Exit(EXIT_USAGE)

    with progress_bar("simulating", "sessions") as progress:
        summary = run_simulation(
            out, sessions, seed, profile.value, tokenizer=tokenizer, overwrite=overwrite, progress=progress
        )
    err_console.print(render_simulation_summary(summary))
