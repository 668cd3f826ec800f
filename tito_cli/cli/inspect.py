"""``tito inspect``: one session's turns, routing tree and samples, as the trainer will see them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from ..algorithm.policy import DEFAULT_FORK_THRESHOLD, Policy
from ..errors import InvalidSessionError, TitoError
from ..render.jsonout import dumps
from ..render.sample_text import render_samples
from ..render.session_view import render_header, render_tree, render_turns
from ..render.tokens import TokenText, resolve_tokenizer
from ..report.session_facts import samples_data, session_header, tree_nodes, turn_rows
from ..run.corpus import Reject
from .app import EXIT_CODES_HELP, app, err_console, guarded
from .viewing import LOGS_ENV, is_plain, open_logs, show

VIEWS = ("turns", "tree", "samples")


def parse_views(value: str) -> list[str]:
    views = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in views if v not in VIEWS]
    if unknown or not views:
        raise typer.BadParameter(
            f"unknown view {', '.join(unknown) or '(none)'}; choose from {', '.join(VIEWS)}",
            param_hint="--view",
        )
    return [v for v in VIEWS if v in views]  # always in the same order


def choose_tokenizer(explicit: Path | None, recorded: str | None, logs: Path) -> tuple[TokenText, str | None]:
    """The decoder for the samples view, and a note for the user when showing ids instead.

    ``--tokenizer`` must load; a tokenizer recorded in the log is looked up
    next to the log and from the working folder, and falls back to ids.
    """
    if explicit is not None:
        if not explicit.is_dir():
            raise typer.BadParameter(f"{explicit} is not a tokenizer folder", param_hint="--tokenizer")
        try:
            return TokenText.load(str(explicit)), None
        except TitoError as exc:
            raise typer.BadParameter(exc.message, param_hint="--tokenizer") from None
    if not recorded:
        return TokenText(), "no tokenizer recorded in the log: showing token ids (pass --tokenizer PATH)"
    path = resolve_tokenizer(recorded, search_from=[logs, Path.cwd()])
    if path is None:
        return TokenText(), f"tokenizer {recorded!r} recorded in the log was not found: showing token ids"
    try:
        return TokenText.load(str(path)), None
    except TitoError as exc:
        return TokenText(), f"tokenizer {recorded!r} could not be loaded ({exc.message}): showing token ids"


@app.command(
    help="Show one session as the trainer will see it: its turns and the linearizer's decision for each, "
    "its routing tree, and its samples with trained tokens marked.\n\n" + EXIT_CODES_HELP
)
@guarded
def inspect(
    session: str = typer.Argument(..., help="A session id, or a unique prefix of one."),
    logs: Path = typer.Option(
        Path("logs"), "--logs", "-l", envvar=LOGS_ENV, help=f"The turn-log folder (or ${LOGS_ENV})."
    ),
    view: str = typer.Option(",".join(VIEWS), "--view", help="Comma-separated views to show: turns, tree, samples."),
    tokenizer: Path | None = typer.Option(
        None,
        "--tokenizer",
        help="Tokenizer folder for decoding (default: the one recorded in the log; token ids without one). "
        "Loaded offline.",
    ),
    ids: bool = typer.Option(False, "--ids", help="Show token ids instead of decoded text."),
    full: bool = typer.Option(False, "--full", help="Show first prompts and long context runs in full."),
    as_json: bool = typer.Option(False, "--json", help="Print the selected views as JSON (stable keys)."),
    fork_threshold: int = typer.Option(
        DEFAULT_FORK_THRESHOLD,
        "--fork-threshold",
        min=0,
        help="The fork threshold the samples were (or will be) rebuilt with.",
    ),
) -> None:
    views = parse_views(view)
    corpus = open_logs(logs, Policy(fork_threshold=fork_threshold))
    result = corpus.session(session)
    if isinstance(result, Reject):
        raise InvalidSessionError(
            f"rejected, it yields no samples: {result.reason}",
            file=result.file,
            row=result.row,
            session_id=result.session_id,
        )

    text, note = TokenText(), None
    if "samples" in views and not ids:
        text, note = choose_tokenizer(tokenizer, corpus.tokenizer, logs)

    if as_json:
        data: dict[str, Any] = {"session": session_header(result)}
        if "samples" in views:
            data["tokenizer"] = text.name
        if "turns" in views:
            data["turns"] = turn_rows(result)
        if "tree" in views:
            data["tree"] = tree_nodes(result)
        if "samples" in views:
            data["samples"] = samples_data(result, text)
        typer.echo(dumps(data))
        if note:
            err_console.print(Text(note, style="dim"))
        return

    if note:
        err_console.print(Text(note, style="dim"))
    parts: list[RenderableType] = [render_header(session_header(result))]
    if "turns" in views:
        parts += [Text("\nturns", style="bold underline"), render_turns(turn_rows(result))]
    if "tree" in views:
        parts += [
            Text("\nrouting tree", style="bold underline"),
            render_tree(result.session_id, tree_nodes(result)),
        ]
    if "samples" in views:
        # Colour marks trained tokens on a terminal; plain text (a pipe, NO_COLOR) uses [brackets].
        samples = render_samples(samples_data(result, text), text, full=full, brackets=is_plain())
        parts += [Text("\nsamples", style="bold underline"), samples]
    show(Group(*parts))
