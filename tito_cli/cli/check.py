"""``tito check``: rebuild a log and compare it with its golden dumps."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer

from ..errors import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_OK, EXIT_OUTPUT
from .app import app, exit_codes_help, guarded, out_console
from .dump import LOGS, NO_DECODE, SESSIONS, STYLE, TOKENIZER, WORKERS, golden_options, option_args
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, RewardChoice
from .unfinished import UNFINISHED, UnfinishedChoice


@app.command(
    help="Rebuild the log and compare every session with its golden dump in --golden. Fails (exit 6) "
    "when a dump changed (a -golden/+rebuilt diff is shown), a session has no golden (new) or a golden "
    "has no session (stale). Files change only with --update, never implicitly (also not under CI=true).\n\n"
    + exit_codes_help(EXIT_BAD_INPUT, EXIT_OUTPUT, EXIT_CHECK_FAILED)
)
@guarded
def check(
    logs: list[Path] = LOGS,
    golden: Path = typer.Option(..., "--golden", "-g", help="Folder holding the golden dumps (<session>.txt)."),
    update: bool = typer.Option(
        False, "--update", help="Accept the rebuilt dumps: write new and changed ones, remove stale ones, list them."
    ),
    diff_lines: int = typer.Option(
        200, "--diff-lines", min=0, help="Show at most this many diff lines per session (0: no limit)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON on stdout."),
    sessions: list[str] | None = SESSIONS,
    policy: str = POLICY,
    fork_threshold: int = FORK_THRESHOLD,
    reward_mode: RewardChoice | None = REWARD_MODE,
    max_sample_tokens: int | None = MAX_SAMPLE_TOKENS,
    style: str = STYLE,
    tokenizer: Path | None = TOKENIZER,
    no_decode: bool = NO_DECODE,
    workers: int = WORKERS,
    unfinished: UnfinishedChoice = UNFINISHED,
) -> None:
    from ..golden.compare import check_goldens
    from ..golden.report import check_report_dict, render_check_report

    options = golden_options(
        policy, fork_threshold, reward_mode, max_sample_tokens, style, tokenizer, no_decode, workers, unfinished
    )
    report = check_goldens(logs, golden, options, sessions or None, update=update)
    words = ["tito", "check", *map(str, logs), "--golden", str(golden)]
    words += option_args(options, tokenizer, sessions)
    accept = shlex.join([*words, "--update"])
    if as_json:
        payload = check_report_dict(report, diff_lines=diff_lines, accept_command=accept)
        typer.echo(json.dumps(payload, indent=2, ensure_ascii=False))
    else:
        out_console.print(
            render_check_report(report, diff_lines=diff_lines, accept_command=accept), soft_wrap=True, end=""
        )
    raise typer.Exit(EXIT_OK if report.ok else EXIT_CHECK_FAILED)
