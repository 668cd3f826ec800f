"""``tito dump``: write golden dumps; also the options ``tito check`` shares with it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from ..errors import EXIT_BAD_INPUT, EXIT_OUTPUT
from .app import app, err_console, exit_codes_help, guarded
from .options import (
    FORK_THRESHOLD,
    MAX_SAMPLE_TOKENS,
    POLICY,
    REWARD_MODE,
    RewardChoice,
    policy_args,
    policy_from,
)
from .unfinished import UNFINISHED, UnfinishedChoice

if TYPE_CHECKING:  # the golden package is imported when a command runs, not at start-up
    from ..golden.compare import GoldenOptions

# Options shared by ``dump`` and ``check``: a check must be run the way its goldens were written.
LOGS = typer.Argument(..., help="Turn-log folders or Parquet files; folders are searched recursively for *.parquet.")
SESSIONS = typer.Option(
    None, "--session", "-s", help="Only this session (id or unique prefix); repeat for several. Default: all."
)
STYLE = typer.Option(
    "full",
    "--style",
    help="'full': header, turns, routing tree, packing decisions and one line per span of each sample; "
    "'compact': one line per sample in bracket notation (1000 1025 [9101] [9009]), for small synthetic cases.",
)
TOKENIZER = typer.Option(
    None,
    "--tokenizer",
    help="Tokenizer folder to decode with (default: the one the log records, found offline; "
    "an error if it is recorded but missing).",
)
NO_DECODE = typer.Option(False, "--no-decode", help="Write token ids even when a tokenizer is available.")
WORKERS = typer.Option(
    1,
    "--workers",
    "-j",
    min=1,
    help="Processes making dumps in parallel; the dumps are byte-identical for any number.",
)


def golden_options(
    policy: str,
    fork_threshold: int,
    reward_mode: RewardChoice | str | None,
    max_sample_tokens: int | None,
    style: str,
    tokenizer: Path | None,
    no_decode: bool,
    workers: int = 1,
    unfinished: UnfinishedChoice = UnfinishedChoice.keep,
) -> GoldenOptions:
    if style not in ("full", "compact"):
        raise typer.BadParameter("must be 'full' or 'compact'", param_hint="--style")
    from ..golden.compare import GoldenOptions

    return GoldenOptions(
        policy=policy_from(policy, fork_threshold, reward_mode, max_sample_tokens),
        style=style,  # type: ignore[arg-type]
        tokenizer=tokenizer,
        decode=not no_decode,
        workers=workers,
        unfinished=unfinished.value,
    )


def option_args(options: GoldenOptions, tokenizer: Path | None, sessions: Any) -> list[str]:
    """The non-default options again, as command-line words (for the command that accepts a change)."""
    words = policy_args(options.policy)
    if options.style != "full":
        words += ["--style", options.style]
    if tokenizer is not None:
        words += ["--tokenizer", str(tokenizer)]
    if not options.decode:
        words.append("--no-decode")
    if options.unfinished != "keep":
        words += ["--unfinished", options.unfinished]
    for session in sessions or ():
        words += ["--session", session]
    return words


@app.command(
    help="Write one deterministic, diff-friendly text dump per session (<out>/<session>.txt) "
    "to keep as golden files for 'tito check'. '--out -' prints the dumps instead. A folder that already "
    "holds dumps is refused unless --update (goldens never change implicitly).\n\n"
    + exit_codes_help(EXIT_BAD_INPUT, EXIT_OUTPUT)
)
@guarded
def dump(
    logs: list[Path] = LOGS,
    out: str = typer.Option(
        ..., "--out", "-o", help="Folder to write the dumps into (created if needed), or '-' for stdout."
    ),
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
    update: bool = typer.Option(
        False,
        "--update",
        help="Write into a folder that already holds dumps: rewrite changed ones and remove stale ones "
        "(when every session is dumped), as 'tito check --update' does.",
    ),
) -> None:
    from ..golden.compare import iter_dumps, write_dumps

    options = golden_options(
        policy, fork_threshold, reward_mode, max_sample_tokens, style, tokenizer, no_decode, workers, unfinished
    )
    if out == "-":
        for one in iter_dumps(logs, options, sessions or None):
            sys.stdout.write(one.text)
        sys.stdout.flush()
        return
    summary = write_dumps(logs, Path(out), options, sessions or None, update=update)
    total = len(summary.written) + len(summary.unchanged)
    removed = f", {len(summary.removed)} stale removed" if summary.removed else ""
    err_console.print(
        f"wrote {len(summary.written)} of {total} dumps to {summary.out_dir} "
        f"({len(summary.unchanged)} already identical{removed})",
        markup=False,
        soft_wrap=True,
    )
