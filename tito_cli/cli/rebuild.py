"""``tito rebuild``."""

from __future__ import annotations

import functools
from enum import Enum
from pathlib import Path
from typing import Any

import typer

from ..errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTPUT, EXIT_REJECTED
from ..export.base import format_names
from ..render.summary import render_rebuild_summary
from ..report.drift import drift_class_counter
from ..run.local import BATCHES_PER_WORKER
from ..run.rebuild import rebuild as rebuild_logs
from ..tokenizer import parse_tokenizer_options
from .app import app, err_console, exit_codes_help, guarded, progress_bar, state
from .export import FORKED, LABELS, LOGPROBS, SPLIT_BY, ForkedChoice, LogprobsChoice, check_format, export_options
from .import_traces import REWARDS_HELP, SESSION_HEADER_HELP, TOKENIZER_HELP, VERBATIM_HELP, ImportFormat
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, RewardChoice, policy_from
from .unfinished import UNFINISHED, UnfinishedChoice


class EngineChoice(Enum):
    local = "local"
    ray = "ray"


@app.command(
    help="Route and linearize every session of a turn log into a samples Parquet file.\n\n"
    + exit_codes_help(EXIT_REJECTED, EXIT_BAD_INPUT, EXIT_OUTPUT)
)
@guarded
def rebuild(
    logs: list[Path] = typer.Argument(
        ...,
        help="Turn-log folders or Parquet files; folders are searched recursively for *.parquet. "
        "With --from: the trace sources of that format.",
    ),
    out: Path = typer.Option(
        ...,
        "--out",
        "-o",
        help="The samples Parquet file to write (docs/spec.md §5), or the --format file "
        "(for slime with --split-by, a pattern holding {rollout_id}).",
    ),
    format: str = typer.Option(
        "parquet",
        "--format",
        help=f"What to write: {', '.join(format_names())}. 'parquet' is the samples file; the others are "
        "trainer formats, written from the rebuilt sessions directly (docs/export.md).",
    ),
    policy: str = POLICY,
    fork_threshold: int = FORK_THRESHOLD,
    reward_mode: RewardChoice | None = REWARD_MODE,
    max_sample_tokens: int | None = MAX_SAMPLE_TOKENS,
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace an existing output file."),
    workers: int = typer.Option(
        None,
        "--workers",
        "-j",
        min=1,
        show_default="this machine's cores, fewer when the log's row groups would be decoded twice",
        help="Processes rebuilding sessions in parallel. The output is the same for any number; "
        "small logs (under 64 MiB of decoded turns, counting 16 KiB a turn for its own work) are rebuilt "
        "in-process, and one whose sessions share its row groups with as many "
        "workers as can split it without decoding it twice (a note says so).",
    ),
    batch_mb: float = typer.Option(
        None,
        "--batch-mb",
        min=0,
        show_default=f"the log split in {BATCHES_PER_WORKER} batches per worker",
        help="Size (MiB of decoded turn columns) of the batches of sessions handed to workers.",
    ),
    unfinished: UnfinishedChoice = UNFINISHED,
    from_format: ImportFormat | None = typer.Option(
        None,
        "--from",
        help="Read LOGS as traces of this capture format (see 'tito import --help'), imported on the fly "
        "into a temporary turn log.",
    ),
    rewards: Path = typer.Option(None, "--rewards", help="With --from: " + REWARDS_HELP),
    tokenizer: str = typer.Option(
        None,
        "--tokenizer",
        help="With --from: "
        + TOKENIZER_HELP
        + " Without --from, with --drift-classes: where to find the log's tokenizer (PATH, or NAME=PATH for a "
        "log that records NAME).",
    ),
    session_header: str = typer.Option(None, "--session-header", help="With --from: " + SESSION_HEADER_HELP),
    verbatim_responses: bool = typer.Option(False, "--verbatim-responses", help="With --from: " + VERBATIM_HELP),
    engine: EngineChoice = typer.Option(
        EngineChoice.local,
        "--engine",
        help="'local': this machine's processes. 'ray': a Ray Data pipeline (pip install 'tito-cli\\[ray]') that "
        "rebuilds sessions across a cluster; the files written are the same, see docs/performance.md.",
    ),
    split_by: int = SPLIT_BY,
    forked: ForkedChoice = FORKED,
    logprobs: LogprobsChoice = LOGPROBS,
    labels: bool = LABELS,
    drift_classes: bool = typer.Option(
        False,
        "--drift-classes",
        help="Also count forks and realigns by drift class in the summary (reasoning dropped, re-tokenized, "
        "tool-call args re-rendered, whitespace trimmed, other; with the markers of the tokenizer's model "
        "family): each worker loads the tokenizer the log records (found offline, as every command finds it, "
        "or as --tokenizer says) and decodes around each fork and realign. When it is not found the summary "
        "says so (and a --tokenizer that does not load is an error).",
    ),
) -> None:
    check_format(format, format_names(), "--format")
    chosen = policy_from(policy, fork_threshold, reward_mode, max_sample_tokens)
    if from_format is not None and engine is EngineChoice.ray:
        raise typer.BadParameter("--from works with the local engine only", param_hint="--from")
    batch_bytes = None if batch_mb is None else batch_mb * (1 << 20)
    # Opt-in: loading a tokenizer in every worker and decoding around each divergence costs more
    # than the rebuild's speed target allows (docs/performance.md).
    counter = None
    if drift_classes:
        log_dirs = [p if p.is_dir() else p.parent for p in logs]
        named = tokenizer is not None and from_format is None
        choice = parse_tokenizer_options([tokenizer]) if named else None
        counter = functools.partial(drift_class_counter, log_dirs=log_dirs, choice=choice, strict=named)
    elif tokenizer and from_format is None:
        raise typer.BadParameter("applies with --from or --drift-classes", param_hint="--tokenizer")
    sink_options = export_options(format, split_by, forked, logprobs, labels)
    if engine is EngineChoice.ray:
        from ..run.ray_data import rebuild_ray

        quiet = not state.verbose  # Ray's INFO lines only with -v
        summary = rebuild_ray(
            logs,
            out,
            chosen,
            overwrite=overwrite,
            output_format=format,
            options=sink_options,
            unfinished=unfinished.value,
            quiet=quiet,
            drift_counter=counter,
        )
        err_console.print(render_rebuild_summary(summary), soft_wrap=True)
        raise typer.Exit(EXIT_REJECTED if summary.rejected else EXIT_OK)
    options: dict[str, Any] = {
        "overwrite": overwrite,
        "workers": workers,
        "batch_bytes": batch_bytes,
        "drift_counter": counter,
    }
    options.update(output_format=format, options=sink_options, unfinished=unfinished.value)
    if from_format is not None:
        from ..render.import_summary import render_import_summary
        from ..run.rebuild_from import rebuild_from

        with progress_bar("rebuilding", "sessions") as progress:
            imported, summary = rebuild_from(
                from_format.value,
                logs,
                out,
                chosen,
                rewards=rewards,
                tokenizer=tokenizer,
                session_header=session_header,
                align_responses=not verbatim_responses,
                progress=progress,
                **options,
            )
        # The imported log was temporary: its rejects are in the rebuild's rejects report.
        err_console.print(render_import_summary(imported, show_out=False), soft_wrap=True)
        err_console.print("", soft_wrap=True)
        err_console.print(render_rebuild_summary(summary), soft_wrap=True)
        raise typer.Exit(EXIT_REJECTED if summary.rejected else EXIT_OK)

    with progress_bar("rebuilding", "sessions") as progress:
        summary = rebuild_logs(logs, out, chosen, progress=progress, **options)

    # soft_wrap: long paths and reasons stay on one line (greppable) when stderr is a file.
    err_console.print(render_rebuild_summary(summary), soft_wrap=True)
    raise typer.Exit(EXIT_REJECTED if summary.rejected else EXIT_OK)
