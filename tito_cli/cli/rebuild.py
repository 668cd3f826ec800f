"""``tito rebuild``."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import NoReturn

import typer

from ..algorithm.policy import Policy
from ..errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_OUTPUT, EXIT_REJECTED
from ..export.formats import format_names
from ..plugins import options_help
from ..render.summary import render_rebuild_summary
from ..run.plan import BATCHES_PER_WORKER
from ..run.rebuild import DriftCounter, RebuildOptions, RebuildSummary, rebuild_with
from ..run.runner import RUNNERS
from .app import app, err_console, exit_codes_help, guarded, progress_bar, state
from .export import (
    FORKED,
    LABELS,
    LOGPROBS,
    SPLIT_BY,
    ForkedChoice,
    LogprobsChoice,
    check_format,
    export_options,
    format_option_values,
)
from .import_traces import (
    FORMAT_CHOICE,
    REWARDS_HELP,
    SESSION_HEADER_HELP,
    TOKENIZER_HELP,
    VERBATIM_HELP,
    check_import_options,
)
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, RewardChoice, plugin_choice, policy_from
from .unfinished import UNFINISHED, UnfinishedChoice


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
    from_format: str | None = typer.Option(
        None,
        "--from",
        click_type=FORMAT_CHOICE,
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
    engine: str = typer.Option(
        "local",
        "--engine",
        click_type=plugin_choice(RUNNERS),
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
    routed_experts: bool = typer.Option(
        False,
        "--routed-experts",
        help="Give each sample its routed experts ([len(tokens) - 1, layers, topk], for rollout routing "
        "replay), assembled from the calls that computed each row with the sample's own prefix; a sample "
        "with a row no call computed is rejected (the rejects report names it), its session's others kept.",
    ),
    exclude_auxiliary: bool = typer.Option(
        False,
        "--exclude-auxiliary",
        help="Leave out the calls recorded as call_kind 'auxiliary' (titles, quota probes) before routing.",
    ),
) -> None:
    check_format(format, format_names(), "--format")
    chosen = policy_from(policy, fork_threshold, reward_mode, max_sample_tokens)
    if routed_experts or exclude_auxiliary:
        chosen = dataclasses.replace(chosen, routed_experts=routed_experts, exclude_auxiliary=exclude_auxiliary)
    if from_format is not None and engine != "local":
        raise typer.BadParameter("--from works with the local engine only", param_hint="--from")
    if not drift_classes and tokenizer and from_format is None:
        raise typer.BadParameter("applies with --from or --drift-classes", param_hint="--tokenizer")
    run = RebuildOptions(
        overwrite=overwrite,
        output_format=format,
        options=export_options(format, format_option_values(split_by, forked, logprobs, labels)),
        unfinished=unfinished.value,
        drift_counter=_drift_counter(logs, tokenizer if from_format is None else None) if drift_classes else None,
        engine=engine,
        engine_options=engine_options(engine, workers, None if batch_mb is None else batch_mb * (1 << 20)),
    )
    if from_format is not None:
        _rebuild_from(from_format, logs, out, chosen, run, rewards, tokenizer, session_header, verbatim_responses)
    with progress_bar("rebuilding", "sessions") as progress:
        _finish(rebuild_with(logs, out, chosen, run, progress=progress))


#: The runners' options as the command line names them.
ENGINE_OPTIONS = {"workers": "--workers", "batch_bytes": "--batch-mb"}


def engine_options(engine: str, workers: int | None, batch_bytes: float | None) -> dict[str, object]:
    """The runner's options from the command line, refusing one the runner does not have (rather than
    ignoring it: ``--engine ray`` with ``--workers`` is a usage error naming ``--workers``)."""
    own = options_help(RUNNERS.get(engine).Options)
    given: dict[str, object] = {
        k: v for k, v in {"workers": workers, "batch_bytes": batch_bytes}.items() if v is not None
    }
    for option in given:
        if option not in own:
            owners = " and ".join(RUNNERS.option_owners()[option])
            raise typer.BadParameter(
                f"applies to the {owners} engine only, not {engine}", param_hint=ENGINE_OPTIONS[option]
            )
    if "quiet" in own:
        given["quiet"] = not state.verbose  # Ray's INFO lines only with -v
    return given


def _rebuild_from(
    from_format: str,
    logs: list[Path],
    out: Path,
    chosen: Policy,
    run: RebuildOptions,
    rewards: Path | None,
    tokenizer: str | None,
    session_header: str | None,
    verbatim_responses: bool,
) -> NoReturn:
    check_import_options(from_format, session_header)
    from ..render.import_summary import render_import_summary
    from ..run.rebuild_from import rebuild_from

    with progress_bar("rebuilding", "sessions") as progress:
        imported, summary = rebuild_from(
            from_format,
            logs,
            out,
            chosen,
            rewards=rewards,
            tokenizer=tokenizer,
            session_header=session_header,
            align_responses=not verbatim_responses,
            run=run,
            progress=progress,
        )
    # The imported log was temporary: its rejects are in the rebuild's rejects report.
    err_console.print(render_import_summary(imported, show_out=False), soft_wrap=True)
    err_console.print("", soft_wrap=True)
    _finish(summary)


def _drift_counter(logs: list[Path], tokenizer: str | None) -> DriftCounter:
    """``--drift-classes``: each worker finds the log's tokenizer (``tokenizer``: where, as
    ``--tokenizer`` says without ``--from``; then a tokenizer not found is an error, not a skip).

    Opt-in: loading a tokenizer in every worker and decoding around each divergence costs more
    than the rebuild's speed target allows (docs/performance.md).
    """
    # Imported here: only --drift-classes finds a tokenizer.
    from ..report.drift import drift_class_counter
    from ..tokenizer import parse_tokenizer_options

    log_dirs = [p if p.is_dir() else p.parent for p in logs]
    choice = parse_tokenizer_options([tokenizer]) if tokenizer is not None else None
    return functools.partial(drift_class_counter, log_dirs=log_dirs, choice=choice, strict=tokenizer is not None)


def _finish(summary: RebuildSummary) -> NoReturn:
    # soft_wrap: long paths and reasons stay on one line (greppable) when stderr is a file.
    err_console.print(render_rebuild_summary(summary), soft_wrap=True)
    raise typer.Exit(EXIT_REJECTED if summary.rejected else EXIT_OK)
