"""``tito inspect``: one session's turns, routing tree and samples, as the trainer will see them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Group, RenderableType
from rich.text import Text

from ..algorithm.session import SessionResult
from ..errors import EXIT_BAD_INPUT, EXIT_REJECTED, InvalidSessionError
from ..render.drift import render_drift_summary, render_drift_windows
from ..render.jsonout import dumps
from ..render.sample_text import render_samples
from ..render.session_view import render_header, render_tree, render_turns
from ..report.drift import Divergence, divergences
from ..report.drift_points import drift_points
from ..report.session_facts import clip_sample, samples_data, session_header, tree_nodes, turn_rows
from ..tokenizer import TokenText
from ..turns import Reject
from .app import app, err_console, exit_codes_help, guarded, out_console
from .options import FORK_THRESHOLD, MAX_SAMPLE_TOKENS, POLICY, REWARD_MODE, TOKENIZER, RewardChoice, policy_from
from .unfinished import UNFINISHED, UnfinishedChoice
from .viewing import LOGS_ENV, UNWRAPPED, choose_tokenizer, is_plain, open_logs, show, with_pager

VIEWS = ("turns", "tree", "drift", "samples")


def parse_views(value: str) -> list[str]:
    views = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in views if v not in VIEWS]
    if unknown or not views:
        raise typer.BadParameter(
            f"unknown view {', '.join(unknown) or '(none)'}; choose from {', '.join(VIEWS)}",
            param_hint="--view",
        )
    return [v for v in VIEWS if v in views]  # always in the same order


#: Tokens shown each side of ``--around N``.
AROUND = 64


def parse_turns(value: str | None) -> range | None:
    """``A..B``, ``A..``, ``..B`` or ``A`` (seqs, inclusive) as a range of seqs."""
    if value is None:
        return None
    lo_text, sep, hi_text = value.partition("..")
    try:
        lo = int(lo_text) if lo_text.strip() else 0
        hi = int(hi_text) if hi_text.strip() else (2**63 - 1 if sep else lo)
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a seq range such as 3..7, 3.. or 5", param_hint="--turns") from None
    if hi < lo:
        raise typer.BadParameter(f"{value!r} ends before it starts", param_hint="--turns")
    return range(lo, hi + 1)


@app.command(
    help="Show one session as the trainer will see it: its turns and the linearizer's decision for each, "
    "its routing tree, and its samples with trained tokens marked. Narrow it down with --sample, --turns, "
    "--drift and --around. On a terminal the output goes through a pager (less -R, or $PAGER); piped "
    "output is never wrapped.\n\n" + exit_codes_help(EXIT_REJECTED, EXIT_BAD_INPUT)
)
@guarded
def inspect(
    session: str = typer.Argument(..., help="A session id, or a unique prefix of one."),
    logs_arg: Path | None = typer.Argument(
        None, metavar="[LOGS]", help=f"The turn-log folder (default ./logs, or ${LOGS_ENV}); or --logs."
    ),
    logs: Path | None = typer.Option(
        None, "--logs", "-l", envvar=LOGS_ENV, help=f"The turn-log folder (or ${LOGS_ENV}), as the LOGS argument."
    ),
    view: str | None = typer.Option(
        None,
        "--view",
        help="Comma-separated views to show: turns, tree, drift (where each fork and realign diverged, decoded, "
        "with its likely class), samples (default: all four; only samples with --sample or --around).",
    ),
    sample: int | None = typer.Option(None, "--sample", "-s", min=0, help="Show only sample K (0-based)."),
    turns: str | None = typer.Option(
        None,
        "--turns",
        help="Only turns with seq in A..B (also A.. or ..B or one seq): in the turns view and in the samples' "
        "regions.",
    ),
    drift: bool = typer.Option(
        False,
        "--drift",
        help="Show only the forks and realigns, each with the held and the prompt tokens decoded around the "
        "first difference.",
    ),
    around: int | None = typer.Option(
        None,
        "--around",
        min=0,
        help=f"Show only the tokens within {AROUND} of this token index in each sample shown (with --sample: "
        "that sample).",
    ),
    tokenizer: list[str] | None = TOKENIZER,
    ids: bool = typer.Option(False, "--ids", help="Show token ids instead of decoded text."),
    full: bool = typer.Option(False, "--full", help="Show first prompts and long context runs in full."),
    as_json: bool = typer.Option(False, "--json", help="Print the selected views as JSON (stable keys)."),
    no_pager: bool = typer.Option(False, "--no-pager", help="Print straight to the terminal, without a pager."),
    policy: str = POLICY,
    fork_threshold: int = FORK_THRESHOLD,
    reward_mode: RewardChoice | None = REWARD_MODE,
    max_sample_tokens: int | None = MAX_SAMPLE_TOKENS,
    unfinished: UnfinishedChoice = UNFINISHED,
) -> None:
    folder = _log_folder(logs_arg, logs)
    views = _views(view, sample, around)
    seqs = parse_turns(turns)
    chosen = policy_from(policy, fork_threshold, reward_mode, max_sample_tokens)
    corpus = open_logs(folder, unfinished)
    result = _session(corpus.session(session, chosen), sample)
    if seqs is not None:
        _check_turns(result, seqs, turns or "")

    text, note = TokenText(), None
    if ("samples" in views or "drift" in views or drift) and not ids:
        text, note = choose_tokenizer(tokenizer, corpus.tokenizer, folder)
    if note:
        err_console.print(Text(note, style="dim"))
    found = divergences(result, text if text.decodes else None) if (drift or "drift" in views) else []
    if drift:
        _show_drift_only(result, found, text, as_json=as_json, no_pager=no_pager)
        return
    samples = _samples(result, text, sample, seqs, around) if "samples" in views else []
    rows = turn_rows(result) if "turns" in views else []
    if seqs is not None:
        rows = [r for r in rows if r["seq"] in seqs]
    if as_json:
        typer.echo(dumps(_views_data(result, views, text, rows, found, samples)))
        return
    page(_views_rendered(result, views, text, rows, found, samples, full=full or around is not None), no_pager)


def _log_folder(logs_arg: Path | None, logs: Path | None) -> Path:
    if logs_arg is not None and logs is not None and logs_arg != logs:
        raise typer.BadParameter(f"two log folders: {logs_arg} and --logs {logs}", param_hint="LOGS")
    return logs_arg or logs or Path("logs")


def _views(view: str | None, sample: int | None, around: int | None) -> list[str]:
    """The views asked for; without --view, all four, or only the samples with --sample or --around."""
    if view is not None:
        return parse_views(view)
    if sample is not None or around is not None:
        return ["samples"]
    return list(VIEWS)


def _session(result: SessionResult | Reject, sample: int | None) -> SessionResult:
    """The rebuilt session, or the error saying why it cannot be shown (rejected, no sample K)."""
    if isinstance(result, Reject):
        raise InvalidSessionError(
            f"rejected, it yields no samples: {result.reason}",
            file=result.file,
            row=result.row,
            session_id=result.session_id,
        )
    if sample is not None and sample >= len(result.samples):
        raise typer.BadParameter(
            f"session {result.session_id} has {len(result.samples)} samples (0 to {len(result.samples) - 1})"
            if result.samples
            else f"session {result.session_id} has no samples",
            param_hint="--sample",
        )
    return result


def _check_turns(result: SessionResult, seqs: range, asked: str) -> None:
    """--turns must name at least one of the session's turns (else the error says which it has)."""
    have = sorted(t.seq for t in result.tree.turns)
    if not any(seq in seqs for seq in have):
        held = "none" if not have else (f"seq {have[0]}" if len(have) == 1 else f"seq {have[0]} to {have[-1]}")
        raise typer.BadParameter(
            f"session {result.session_id} has no turn in {asked}: its {len(have)} turn"
            f"{'' if len(have) == 1 else 's'} are {held}",
            param_hint="--turns",
        )


def _show_drift_only(
    result: SessionResult, found: list[Divergence], text: TokenText, *, as_json: bool, no_pager: bool
) -> None:
    """--drift: each fork and realign, the held and the prompt tokens decoded around the first difference."""
    points = drift_points(result, found)
    if as_json:
        drift_data = [p.as_dict() for p in points]
        typer.echo(dumps({"session": session_header(result), "tokenizer": text.name, "drift": drift_data}))
        return
    page(
        [render_header(session_header(result)), Text(""), render_drift_windows(points, text, plain=is_plain())],
        no_pager,
    )


def _samples(
    result: SessionResult, text: TokenText, sample: int | None, seqs: range | None, around: int | None
) -> list[dict[str, Any]]:
    """The samples shown: sample K or all, those through --turns, clipped to --turns and --around."""
    samples = samples_data(result, text, None if sample is None else [sample])
    if seqs is not None:
        samples = [s for s in samples if any(seq in seqs for seq in s["turns"])]
    if seqs is not None or around is not None:
        window = None if around is None else range(max(0, around - AROUND), around + AROUND + 1)
        samples = [clip_sample(s, text, seqs=seqs, tokens=window, focus=around) for s in samples]
    return samples


def _views_data(
    result: SessionResult,
    views: list[str],
    text: TokenText,
    rows: list[dict[str, Any]],
    found: list[Divergence],
    samples: list[dict[str, Any]],
) -> dict[str, Any]:
    data: dict[str, Any] = {"session": session_header(result)}
    if "samples" in views or "drift" in views:
        data["tokenizer"] = text.name
    if "turns" in views:
        data["turns"] = rows
    if "tree" in views:
        data["tree"] = tree_nodes(result)
    if "drift" in views:
        data["drift"] = [d.as_dict() for d in found]
    if "samples" in views:
        data["samples"] = samples
    return data


def _views_rendered(
    result: SessionResult,
    views: list[str],
    text: TokenText,
    rows: list[dict[str, Any]],
    found: list[Divergence],
    samples: list[dict[str, Any]],
    *,
    full: bool,
) -> list[RenderableType]:
    parts: list[RenderableType] = [render_header(session_header(result))]
    if "turns" in views:
        parts += [Text("\nturns", style="bold underline"), render_turns(rows, result.policy.realign_effect)]
    if "tree" in views:
        parts += [
            Text("\nrouting tree", style="bold underline"),
            render_tree(result.session_id, tree_nodes(result)),
        ]
    if "drift" in views:
        parts += [Text("\ndrift", style="bold underline"), render_drift_summary(found)]
    if "samples" in views:
        # Colour marks trained tokens on a terminal; plain text (a pipe, NO_COLOR) uses [brackets].
        shown = render_samples(samples, text, full=full, brackets=is_plain())
        parts += [Text("\nsamples", style="bold underline"), shown]
    return parts


def page(parts: list[RenderableType], no_pager: bool) -> None:
    """Into the pager on a terminal (unless --no-pager); piped, never wrapped: a line is a line for grep."""
    renderable = Group(*parts)
    if out_console.is_terminal:
        if no_pager:
            out_console.print(renderable)
        else:
            with_pager(renderable)
    else:
        show(renderable, width=UNWRAPPED)
