"""``tito stats``: corpus totals and distributions, from :meth:`CorpusStats.to_dict`."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ..algorithm.policy import policy_label
from ..report.session_facts import FORK_LABELS
from .visible import one_line

__all__ = ["render_corpus_stats"]


def _n(value: int | float | None) -> str:
    if value is None:
        return "—"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _sessions(n: int) -> str:
    return f"{n:,} session{'' if n == 1 else 's'}"


def _section(title: str) -> Text:
    return Text(f"\n{title}", style="bold underline")


def _grid() -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column()
    table.add_column(justify="right")
    table.add_column(style="dim")
    return table


def _distribution(label: str, d: dict[str, Any]) -> list[str]:
    return [label, *(_n(d[k]) for k in ("p50", "p90", "p99", "max"))]


def render_corpus_stats(s: dict[str, Any]) -> RenderableType:
    parts: list[RenderableType] = [Text(f"policy {policy_label(s['policy'])}")]

    totals = _grid()
    totals.add_row("sessions", _n(s["sessions"]), f"{_n(s['rebuilt'])} rebuilt, {_n(s['rejected'])} rejected")
    totals.add_row("turns", _n(s["turns"]), f"{_n(s['skipped_turns'])} skipped (empty prompt)")
    totals.add_row("samples", _n(s["samples"]), "")
    if s["left_out_samples"]:
        totals.add_row("  left out", _n(s["left_out_samples"]), "first prompt longer than max_sample_tokens")
    tokens = s["tokens"]
    share = f"{100 * tokens['trained_share']:.1f}% of response tokens" if tokens["trained_share"] is not None else ""
    totals.add_row("trained tokens", _n(tokens["trained"]), share)
    totals.add_row("context tokens", _n(tokens["context"]), "loss 0 inside response regions")
    f = s["forks"]
    totals.add_row("forks", _n(f["total"]), f"{f['per_100_turns']:g} per 100 turns, in {_sessions(f['sessions'])}")
    for cause, count in f["by_cause"].items():
        totals.add_row(f"  {FORK_LABELS[cause]}", _n(count), "")
    r = s["realigns"]
    totals.add_row("realigns", _n(r["total"]), f"{r['per_100_turns']:g} per 100 turns, in {_sessions(r['sessions'])}")
    totals.add_row("rewrite merges", _n(s["rewrite_merges"]), "")
    if s["ambiguous_rewrites"]:
        totals.add_row("ambiguous rewrites", _n(s["ambiguous_rewrites"]), "several candidates: not merged")
    examples = s["sessions_without_sessions_row_examples"]
    named = f", e.g. {', '.join(examples)}" if examples else ""
    totals.add_row(
        "no sessions row", _n(s["sessions_without_sessions_row"]), f"sessions rebuilt with reward 0.0{named}"
    )
    parts.append(totals)

    parts.append(_section("drift classes"))
    classes = s["drift_classes"]
    drift = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 2))
    drift.add_column("")
    drift.add_column("forks", justify="right")
    drift.add_column("realigns", justify="right")
    for name in classes["forks"]:
        forks, realigns = classes["forks"][name], classes["realigns"][name]
        if forks or realigns:
            drift.add_row(name, _n(forks), _n(realigns))
    parts.append(drift if drift.row_count else Text("no forks or realigns"))
    if not classes["decoded"] and drift.row_count:
        parts.append(Text("no tokenizer: the drift could not be decoded (pass --tokenizer PATH)", style="dim"))

    parts.append(_section("distributions"))
    dist = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 2))
    dist.add_column("")
    for name in ("p50", "p90", "p99", "max"):
        dist.add_column(name, justify="right")
    dist.add_row(*_distribution("samples per session", s["samples_per_session"]))
    dist.add_row(*_distribution("turns per session", s["turns_per_session"]))
    dist.add_row(*_distribution("prompt tokens per turn", s["prompt_tokens"]))
    dist.add_row(*_distribution("output tokens per turn", s["output_tokens"]))
    parts.append(dist)
    histogram = s["samples_per_session"]["histogram"]
    if histogram:
        counts = "  ".join(f"{n}: {_n(c)}" for n, c in histogram.items())
        parts.append(Text(f"samples per session, rebuilt sessions by count — {counts}", style="dim"))

    if "capture_history" in s:
        parts.extend(_capture_history(s["capture_history"]))
    if "provenance" in s:
        p = s["provenance"]
        grid = _grid()
        grid.add_row("turns with provenance", _n(p["turns"]), "weight versions, routed experts, sampling, call kind")
        grid.add_row("auxiliary calls", _n(p["auxiliary_calls"]), "left out by rebuild --exclude-auxiliary")
        grid.add_row("stale samples", _n(p["stale_samples"]), "trained tokens from more than one weight version")
        parts.extend([_section("provenance"), grid])

    zero = s["zero_sample_sessions"]
    parts.append(_section("sessions with no samples"))
    if not zero:
        parts.append(Text("none"))
    else:
        why = _grid()
        for reason, entry in zero.items():
            examples = one_line(", ".join(entry["examples"]))
            why.add_row(Text(one_line(reason)), _n(entry["sessions"]), Text("e.g. " + examples))
        parts.append(why)
    if s["groups"]["groups"]:
        parts.extend(_groups(s["groups"]))
    return Group(*parts)


def _capture_history(h: dict[str, Any]) -> list[RenderableType]:
    """tito serve --history canonical: turns continued, and why the others were rendered whole."""
    grid = _grid()
    grid.add_row("continued (canonical)", _n(h["canonical"]), "prompt = the held tokens + only the new text")
    grid.add_row("rendered whole", _n(h["rendered"]), "")
    for reason, count in h["rendered_by_reason"].items():
        grid.add_row(f"  {one_line(reason)}", _n(count), "")
    return [_section("capture history"), grid]


def _groups(g: dict[str, Any]) -> list[RenderableType]:
    """GRPO group integrity: groups whose sample count is not their session count."""
    sizes = ", ".join(f"{n} in {_n(c)} group{'' if c == 1 else 's'}" for n, c in g["sessions_per_group"].items())
    parts: list[RenderableType] = [
        _section("groups"),
        Text(f"{_n(g['groups'])} group{'' if g['groups'] == 1 else 's'} by group_index (sessions per group: {sizes})"),
    ]
    bad = g["mismatched"]
    if not bad:
        parts.append(Text("every group has one sample per session"))
        return parts
    which = "group where samples ≠ sessions" if len(bad) == 1 else "groups where samples ≠ sessions"
    parts.append(Text(f"{_n(len(bad))} {which} (n_samples_per_prompt breaks):"))
    grid = Table.grid(padding=(0, 2))
    for justify in ("right", "right", "right", "right", "left"):
        grid.add_column(justify=justify)
    grid.add_row(*(Text(h, style="bold") for h in ("group", "sessions", "expected", "samples", "sessions ≠ 1 sample")))
    for fact in bad[:10]:
        odd = ", ".join(f"{sid}: {n}" for sid, n in fact["sessions_not_one_sample"].items())
        grid.add_row(
            str(fact["group_index"]), _n(fact["sessions"]), _n(fact["expected_samples"]), _n(fact["samples"]), odd
        )
    parts.append(grid)
    if len(bad) > 10:
        parts.append(Text(f"… and {len(bad) - 10} more (see --json)", style="dim"))
    return parts
