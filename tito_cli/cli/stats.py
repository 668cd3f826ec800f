"""``tito stats``: corpus totals and distributions."""

from __future__ import annotations

from pathlib import Path

import typer

from ..render.corpus_stats import render_corpus_stats
from ..render.jsonout import dumps
from ..report.facts import corpus_stats
from .app import EXIT_CODES_HELP, app, guarded
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, RewardChoice, policy_from
from .viewing import LOGS_ENV, open_logs, show


@app.command(
    "stats",
    help="Corpus totals and distributions: samples per session, trained vs context tokens, forks by cause, "
    "realigns, rewrite merges, sessions with no samples and why, prompt/output length percentiles. "
    "Compare the --json output of two harness versions to spot a drift regression.\n\n" + EXIT_CODES_HELP,
)
@guarded
def stats(
    logs: Path = typer.Argument(Path("logs"), envvar=LOGS_ENV, help=f"The turn-log folder (or ${LOGS_ENV})."),
    as_json: bool = typer.Option(False, "--json", help="Print the statistics as JSON (stable keys)."),
    policy: str = POLICY,
    fork_threshold: int = FORK_THRESHOLD,
    reward_mode: RewardChoice | None = REWARD_MODE,
    max_sample_tokens: int | None = MAX_SAMPLE_TOKENS,
) -> None:
    chosen = policy_from(policy, fork_threshold, reward_mode, max_sample_tokens)
    corpus = open_logs(logs)
    data = corpus_stats(corpus.results(chosen), chosen).to_dict()
    if as_json:
        typer.echo(dumps(data))
        return
    show(render_corpus_stats(data))
