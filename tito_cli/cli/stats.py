"""``tito stats``: corpus totals and distributions."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import EXIT_BAD_INPUT
from ..render.corpus_stats import render_corpus_stats
from ..render.jsonout import dumps
from ..report.facts import corpus_stats
from .app import app, exit_codes_help, guarded
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, RewardChoice, policy_from
from .unfinished import UNFINISHED, UnfinishedChoice
from .viewing import LOGS_ENV, open_logs, show


@app.command(
    "stats",
    help="Corpus totals and distributions: samples per session, trained vs context tokens, forks by cause, "
    "realigns, rewrite merges, sessions with no samples and why, prompt/output length percentiles. "
    "Compare the --json output of two harness versions to spot a drift regression.\n\n"
    + exit_codes_help(EXIT_BAD_INPUT),
)
@guarded
def stats(
    logs: Path = typer.Argument(Path("logs"), envvar=LOGS_ENV, help=f"The turn-log folder (or ${LOGS_ENV})."),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON (stable keys)."),
    policy: str = POLICY,
    fork_threshold: int = FORK_THRESHOLD,
    reward_mode: RewardChoice | None = REWARD_MODE,
    max_sample_tokens: int | None = MAX_SAMPLE_TOKENS,
    unfinished: UnfinishedChoice = UNFINISHED,
) -> None:
    chosen = policy_from(policy, fork_threshold, reward_mode, max_sample_tokens)
    corpus = open_logs(logs, unfinished)
    data = corpus_stats(corpus.results(chosen), chosen).to_dict()
    if as_json:
        typer.echo(dumps(data))
        return
    show(render_corpus_stats(data))
