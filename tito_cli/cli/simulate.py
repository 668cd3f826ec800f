"""``tito simulate``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path

import typer

from ..errors import EXIT_OUTPUT
from .app import app, err_console, exit_codes_help, guarded, progress_bar


class ProfileChoice(Enum):
    """The simulator's profiles (``tito_cli.simulate.PROFILES``)."""

    demo = "demo"
    swe = "swe"
    qwen3 = "qwen3"
    deepseek_v3 = "deepseek-v3"
    gpt_oss = "gpt-oss"
    llama3 = "llama3"


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
        "'swe': long ones (30-60 turns, prompts past 64k tokens) for benchmarks; "
        "'qwen3': small sessions through the real Qwen3 tokenizer and chat template (reasoning, follow-up "
        "questions, tool-call JSON re-rendered by the server); 'deepseek-v3', 'gpt-oss', 'llama3': the same "
        "sessions through DeepSeek-V3.1's, gpt-oss's and Llama-3-Instruct's real templates (tito ships the "
        "first two templates; give the tokenizer with --tokenizer NAME=PATH, see docs/families.md).",
    ),
    tokenizer: str | None = typer.Option(
        None,
        "--tokenizer",
        metavar="NAME|NAME=PATH",
        help="Tokenizer (with a chat template) to render and tokenize with, recorded in the log as NAME: a "
        "folder or a hub id in the local Hugging Face cache; NAME=PATH records NAME and loads PATH. "
        "Default: the profile's, shipped with tito.",
    ),
    overwrite: bool = typer.Option(
        False,
        "--overwrite",
        help="Replace the Parquet files already in --out (once the new log is complete: a failed run keeps them).",
    ),
    provenance: bool = typer.Option(
        False,
        "--provenance",
        help="The simulated server also reports weight versions (changing every 700 generated tokens) and "
        "routed experts (4 layers x top-2, a function of the prefix alone), recorded with every turn "
        "(docs/spec.md §2.1).",
    ),
) -> None:
    # The simulator (and transformers, through it) is imported only when simulating.
    from ..render.simulation import render_simulation_summary
    from ..simulate import simulate as run_simulation

    name, _, folder = (tokenizer or "").partition("=")
    with progress_bar("simulating", "sessions") as progress:
        summary = run_simulation(
            out,
            sessions,
            seed,
            profile.value,
            tokenizer=name or None,
            tokenizer_dir=folder or None,
            overwrite=overwrite,
            progress=progress,
            provenance=provenance,
        )
    err_console.print(render_simulation_summary(summary))
