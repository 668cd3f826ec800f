"""``tito ls``: one row per session, filtered and sorted."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from ..errors import EXIT_BAD_INPUT
from ..render.jsonout import dumps
from ..render.listing import render_listing
from ..render.plain import to_plain
from ..report.facts import FIELDS, select_rows, session_row
from ..report.filter import FilterError, compile_filter
from .app import app, err_console, exit_codes_help, guarded, out_console
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, RewardChoice, policy_from
from .unfinished import UNFINISHED, UnfinishedChoice
from .viewing import LOGS_ENV, open_logs

_FIELDS_HELP = "; ".join(f"{name}: {meaning}" for name, meaning in FIELDS.items())


@app.command(
    "ls",
    help="List the sessions of a turn log: turns, leaves, samples, trained tokens, forks, realigns, "
    "rewrite merges, reward, and why a session was rejected.\n\n" + exit_codes_help(EXIT_BAD_INPUT),
)
@guarded
def ls(
    logs: Path = typer.Argument(Path("logs"), envvar=LOGS_ENV, help=f"The turn-log folder (or ${LOGS_ENV})."),
    where: str = typer.Option(
        "",
        "--where",
        "-w",
        help="Keep sessions matching an expression such as 'forks > 0 and samples == 0' "
        "(==, !=, <, <=, >, >=, ~ contains; and, or, not, parentheses; a bare field means non-zero). "
        "Fields: " + _FIELDS_HELP + ".",
    ),
    forked: bool = typer.Option(False, "--forked", help="Only sessions with at least one fork."),
    realigned: bool = typer.Option(False, "--realigned", help="Only sessions with at least one realign."),
    merged: bool = typer.Option(False, "--merged", help="Only sessions with a rewrite merge."),
    rejected: bool = typer.Option(False, "--rejected", help="Only rejected sessions."),
    no_samples: bool = typer.Option(False, "--no-samples", help="Only sessions that yield no sample."),
    sort: str = typer.Option("session", "--sort", "-s", help="Field to sort by (nulls last)."),
    desc: bool = typer.Option(False, "--desc", help="Sort in descending order."),
    limit: int | None = typer.Option(None, "--limit", "-n", min=1, help="Show at most this many sessions."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as a JSON list (stable keys)."),
    policy: str = POLICY,
    fork_threshold: int = FORK_THRESHOLD,
    reward_mode: RewardChoice | None = REWARD_MODE,
    max_sample_tokens: int | None = MAX_SAMPLE_TOKENS,
    unfinished: UnfinishedChoice = UNFINISHED,
) -> None:
    try:
        predicate = compile_filter(where, FIELDS)
        if sort not in FIELDS:
            raise FilterError(f"cannot sort by {sort!r}; fields: {', '.join(FIELDS)}")
    except FilterError as exc:
        raise typer.BadParameter(str(exc), param_hint="--where" if where and sort in FIELDS else "--sort") from None
    flags = {
        "forks": forked,
        "realigns": realigned,
        "merges": merged,
        "rejected": rejected,
    }

    chosen = policy_from(policy, fork_threshold, reward_mode, max_sample_tokens)
    corpus = open_logs(logs, unfinished)
    total = 0

    def matching() -> Iterator[dict[str, Any]]:
        nonlocal total
        for item in corpus.results(chosen):
            total += 1
            row = session_row(item)
            if any(on and not row[name] for name, on in flags.items()):
                continue
            if no_samples and row["samples"]:
                continue
            if predicate(row):
                yield row

    try:
        # With --limit, only that many rows are held, however many sessions the log has.
        shown, matched = select_rows(matching(), sort, descending=desc, limit=limit)
    except FilterError as exc:
        raise typer.BadParameter(str(exc), param_hint="--where") from None

    if as_json:
        typer.echo(dumps(shown))
        return
    if not shown:
        err_console.print(f"no session matches (of {total}) · policy {chosen.label()}", style="yellow")
        return
    if out_console.is_terminal:
        out_console.print(render_listing(shown, width=out_console.width))
    else:
        # Into a pipe or a file nothing is cut: the listing is data.
        typer.echo(to_plain(render_listing(shown, width=100_000), width=100_000), nl=False)
    more = f", {matched - len(shown)} more not shown (--limit)" if len(shown) < matched else ""
    err_console.print(f"{len(shown)} of {total} sessions{more} · policy {chosen.label()}", style="dim")
