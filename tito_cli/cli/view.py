"""``tito view``: sessions as one self-contained HTML page, to open from disk in a browser."""

from __future__ import annotations

from pathlib import Path

import typer

from .._atomic import atomic_path
from .._targets import check_target
from ..run.corpus import find_session_id
from .app import EXIT_CODES_HELP, app, err_console, guarded, progress_bar
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, TOKENIZER, RewardChoice, policy_from
from .unfinished import UNFINISHED, UnfinishedChoice
from .viewing import LOGS_ENV, choose_tokenizer, open_logs


@app.command(
    "view",
    help="Write sessions as one self-contained HTML page: a corpus page (sessions table you can sort and "
    "filter, charts of samples per session, forks by cause and drift class, trained vs context tokens, where "
    "drift falls) and a page per session (routing tree, turns with the linearizer's decisions, every sample's "
    "tokens decoded with trained tokens highlighted, each fork or realign with its decoded divergence). "
    "Nothing is fetched when the page is opened.\n\n" + EXIT_CODES_HELP,
)
@guarded
def view(
    sessions: list[str] | None = typer.Argument(None, help="Session ids (or unique prefixes) to show; or --all."),
    show_all: bool = typer.Option(False, "--all", help="Show every session of the log."),
    logs: Path = typer.Option(
        Path("logs"), "--logs", "-l", envvar=LOGS_ENV, help=f"The turn-log folder (or ${LOGS_ENV})."
    ),
    out: Path = typer.Option(..., "--out", "-o", help="The HTML file to write (replaced if it exists)."),
    tokenizer: list[str] | None = TOKENIZER,
    policy: str = POLICY,
    fork_threshold: int = FORK_THRESHOLD,
    reward_mode: RewardChoice | None = REWARD_MODE,
    max_sample_tokens: int | None = MAX_SAMPLE_TOKENS,
    unfinished: UnfinishedChoice = UNFINISHED,
) -> None:
    if bool(sessions) == show_all:
        raise typer.BadParameter("give session ids or --all (not both)", param_hint="SESSIONS")
    # Replaced if it exists, but never a file of the log, a special file or a symbolic link.
    check_target(out, overwrite=True, reads=[logs])
    chosen = policy_from(policy, fork_threshold, reward_mode, max_sample_tokens)
    corpus = open_logs(logs, unfinished)
    only = None
    if sessions:
        ids = corpus.session_ids()
        only = sorted({find_session_id(ids, s) for s in sessions})
    text, note = choose_tokenizer(tokenizer, corpus.tokenizer, logs)
    if note:
        err_console.print(note, style="dim")
    total = len(only) if only is not None else len(corpus.session_ids())
    # Imported here: every command imports all the command modules, and jinja2 is a view's alone.
    from ..render.html import view_page

    with progress_bar("rendering", "sessions") as bar:
        page = view_page(
            corpus.results(chosen, only=only),
            text,
            title=str(logs),
            policy=chosen,
            progress=(lambda done: bar(done, total)) if bar is not None else None,
        )
    with atomic_path(out) as tmp:
        tmp.write_text(page, encoding="utf-8")
    err_console.print(f"wrote {out} ({len(page.encode()) / 1e6:.1f} MB, {total} sessions)", style="bold")
