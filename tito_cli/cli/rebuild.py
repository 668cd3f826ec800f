"""``tito rebuild``."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..algorithm.policy import DEFAULT_FORK_THRESHOLD, Policy
from ..errors import EXIT_OK, EXIT_REJECTED
from ..render.summary import render_rebuild_summary
from ..run.local import BATCHES_PER_WORKER
from ..run.rebuild import rebuild as rebuild_logs
from .app import EXIT_CODES_HELP, app, err_console, guarded, progress_bar


class RewardChoice(Enum):
    split = "split"
    full = "full"


class EngineChoice(Enum):
    local = "local"
    ray = "ray"


@app.command(help="Route and linearize every session of a turn log into a samples Parquet file.\n\n" + EXIT_CODES_HELP)
@guarded
def rebuild(
    logs: list[Path] = typer.Argument(
        ..., help="Turn-log folders or Parquet files; folders are searched recursively for *.parquet."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The samples Parquet file to write (docs/spec.md §5)."),
    fork_threshold: int = typer.Option(
        DEFAULT_FORK_THRESHOLD,
        "--fork-threshold",
        min=0,
        help="Drift (tokens) inside the latest response shorter than this is realigned, longer forks; "
        "also bounds short-rewrite absorption. 0 disables both.",
    ),
    reward_mode: RewardChoice = typer.Option(
        RewardChoice.split,
        "--reward-mode",
        help="'split': each sample gets reward / samples of its session; 'full': each gets the whole reward.",
    ),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
    workers: int = typer.Option(
        None,
        "--workers",
        "-j",
        min=1,
        show_default="this machine's cores",
        help="Processes rebuilding sessions in parallel. The output is the same for any number; "
        "logs under 64 MiB are rebuilt in-process.",
    ),
    batch_mb: float = typer.Option(
        None,
        "--batch-mb",
        min=0,
        show_default=f"the log split in {BATCHES_PER_WORKER} batches per worker",
        help="Size (MiB of decoded turn columns) of the batches of sessions handed to workers.",
    ),
    engine: EngineChoice = typer.Option(
        EngineChoice.local,
        "--engine",
        help="'local': this machine's processes, one samples file. 'ray': a Ray Data pipeline "
        "(pip install 'tito[ray]'); --out is then a folder of Parquet files, see docs/performance.md.",
    ),
) -> None:
    policy = Policy(fork_threshold=fork_threshold, reward_mode=reward_mode.value)
    batch_bytes = None if batch_mb is None else batch_mb * (1 << 20)
    if engine is EngineChoice.ray:
        from ..run.ray_data import rebuild_ray

        summary = rebuild_ray(logs, out, policy, overwrite=overwrite)
        err_console.print(render_rebuild_summary(summary))
        raise typer.Exit(EXIT_REJECTED if summary.rejected else EXIT_OK)
    options: dict[str, Any] = {"overwrite": overwrite, "workers": workers, "batch_bytes": batch_bytes}

    with progress_bar("rebuilding", "sessions") as progress:
        summary = rebuild_logs(logs, out, policy, progress=progress, **options)

    # soft_wrap: long paths and reasons stay on one line (greppable) when stderr is a file.
    err_console.print(render_rebuild_summary(summary), soft_wrap=True)
    raise typer.Exit(EXIT_REJECTED if summary.rejected else EXIT_OK)
