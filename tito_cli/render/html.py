"""``tito view``: sessions as one self-contained HTML page (corpus table and charts, session pages).

The page is a Jinja template with its CSS and JavaScript inlined (package
data in ``render/view/``), and the sessions as one inline JSON document:
every fact comes from :mod:`tito_cli.report` (the same functions ``inspect``,
``ls`` and ``stats`` use), packed compactly -- a sample is its token ids and
its regions, and each distinct id is decoded once into a vocabulary table --
so the browser draws a sample's tokens in chunks as they are scrolled to.
Nothing on the page is fetched: a Content-Security-Policy forbids it.

Charts are plain inline SVG bars drawn from ``CorpusStats.to_dict()`` (what
``tito stats`` prints) and from the sessions' divergences.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from importlib import resources
from typing import Any
from urllib.parse import quote

import jinja2
from jinja2.sandbox import SandboxedEnvironment

from ..algorithm.policy import Policy, policy_label
from ..algorithm.session import SessionResult
from ..report.drift import Divergence, divergences
from ..report.drift_points import drift_points
from ..report.facts import FIELDS, corpus_stats, session_row
from ..report.session_facts import (
    FORK_LABELS,
    decision_text,
    sample_regions,
    session_header,
    short_decision,
    tree_nodes,
    turn_rows,
)
from ..tokenizer import TokenText
from ..turns import Reject
from .sample_text import seq_ranges
from .session_view import DECISION_LEGEND

__all__ = ["DRIFT_POSITION_BINS", "bar_chart", "view_page"]

#: The filters above the sessions table: row flag → label.
FLAGS = {
    "forked": "forked",
    "realigned": "realigned",
    "merged": "rewrite merged",
    "rejected": "rejected",
    "nosamples": "no samples",
    "unfinished": "unfinished",
}
#: Filters by the policy's per-sample flags (slime-0.3, docs/spec.md §8.6): row flag → (sample flag, label).
#: Shown when some sample of the page carries flags; a session has the row flag when any of its samples does.
POLICY_FLAGS = {
    "truncated": ("truncated", "truncated"),
    "usetool": ("use_tool", "uses a tool"),
    "illformed": ("ill_formed", "ill-formed"),
}
_NUMERIC = {"turns", "leaves", "samples", "trained", "context", "forks", "realigns", "merges", "reward"}
_HOT = {"forks", "realigns", "merges"}
#: Drift position within the context is shown in this many bins of the held tokens' length.
DRIFT_POSITION_BINS = 10

Progress = Callable[[int], None]


def _render(**context: Any) -> str:
    """The page template (sandboxed, as every template tito renders) filled with ``context``."""
    source = (resources.files("tito_cli.render") / "view" / "page.html.j2").read_text(encoding="utf-8")
    env = SandboxedEnvironment(autoescape=True, undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.from_string(source).render(**context)


def _asset(name: str) -> str:
    return (resources.files("tito_cli.render") / "view" / name).read_text(encoding="utf-8")


# -- charts -------------------------------------------------------------------------


def bar_chart(title: str, bars: list[tuple[str, int]], *, note: str = "") -> str:
    """Horizontal bars as an SVG element: one row per (label, value), the value written at the bar's end."""
    row, label_width, bar_width, pad = 22, 170, 200, 8
    height = 30 + row * max(len(bars), 1) + (18 if note else 0)
    width = label_width + bar_width + 70
    top = max((v for _, v in bars), default=0)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{html.escape(title)}">',
        f'<text x="{pad}" y="18" class="title">{html.escape(title)}</text>',
    ]
    if not bars:
        out.append(f'<text x="{pad}" y="42" class="muted">none</text>')
    for i, (label, value) in enumerate(bars):
        y = 28 + i * row
        length = 0 if top == 0 else max(1, round(bar_width * value / top)) if value else 0
        out.append(
            f'<text x="{label_width - 6}" y="{y + 14}" text-anchor="end">{html.escape(label)}</text>'
            f'<rect x="{label_width}" y="{y + 3}" width="{length}" height="{row - 8}" fill="#5b8def">'
            f"<title>{html.escape(label)}: {value:,}</title></rect>"
            f'<text x="{label_width + length + 5}" y="{y + 14}">{value:,}</text>'
        )
    if note:
        out.append(f'<text x="{pad}" y="{height - 6}" class="muted">{html.escape(note)}</text>')
    out.append("</svg>")
    return "".join(out)


def _charts(stats: dict[str, Any], drift: list[Divergence]) -> list[str]:
    histogram = stats["samples_per_session"]["histogram"]
    forks = [d for d in drift if d.kind == "fork"]
    classes = Counter(d.drift_class or "unknown (no tokenizer)" for d in forks)
    positions = [0] * DRIFT_POSITION_BINS
    for d in drift:
        held = d.index + d.drift
        share = d.index / held if held else 0.0
        positions[min(int(share * DRIFT_POSITION_BINS), DRIFT_POSITION_BINS - 1)] += 1
    step = 100 // DRIFT_POSITION_BINS
    tokens = stats["tokens"]
    share = tokens["trained_share"]
    return [
        bar_chart(
            "samples per session",
            [(f"{n} sample{'' if n == '1' else 's'}", c) for n, c in histogram.items()],
            note="rebuilt sessions by their number of samples",
        ),
        bar_chart("forks by cause", [(FORK_LABELS[c], n) for c, n in stats["forks"]["by_cause"].items()]),
        bar_chart("forks by drift class", sorted(classes.items(), key=lambda kv: (-kv[1], kv[0]))),
        bar_chart(
            "trained vs context tokens",
            [("trained (loss 1)", tokens["trained"]), ("context (loss 0)", tokens["context"])],
            note=f"trained: {100 * share:.1f}% of response tokens" if share is not None else "",
        ),
        bar_chart(
            "drift position within the context",
            [(f"{i * step}–{(i + 1) * step}% of held", n) for i, n in enumerate(positions)],
            note="forks and realigns: first difference / tokens held",
        ),
    ]


# -- sessions -------------------------------------------------------------------------


def _session_payload(result: SessionResult, drift: list[Divergence], used: set[int]) -> dict[str, Any]:
    header = session_header(result)
    turns = turn_rows(result)
    for row in turns:
        row["text"] = decision_text(row)
    nodes = tree_nodes(result)
    for node in nodes:
        d = node["decision"]
        node["decision_label"] = short_decision(d) if d is not None else None
    samples = []
    for i, (sample, reward) in enumerate(zip(result.samples, result.rewards, strict=True)):
        ids = sample.tokens.tolist()
        used.update(ids)
        samples.append(
            {
                "index": i,
                "leaf": sample.leaf,
                "segment": sample.segment,
                "reward": reward,
                "fork_label": FORK_LABELS[sample.fork.value] if sample.fork is not None else None,
                "turn_ranges": seq_ranges(list(sample.seqs)),
                "trained_ranges": seq_ranges(list(sample.trained_seqs)),
                "tokens": len(ids),
                "first_prompt_length": sample.first_prompt_length,
                "response_length": sample.response_length,
                "trained_tokens": int(sample.loss_mask.sum()),
                "ids": ids,
                "regions": [[r.kind, r.seq, r.start, r.end, r.trained, r.generated] for r in sample_regions(sample)],
            }
        )
    for d in drift:
        used.update(d.held_ids)
        used.update(d.prompt_ids)
    points = [p.as_dict() for p in drift_points(result, drift)]
    fork_parts = [f"{FORK_LABELS[c]} {n}" for c, n in header["forks"].items() if n]
    return {
        "id": result.session_id,
        "rejected": None,
        "header": header,
        "fork_summary": ", ".join(fork_parts) or "none",
        "notes": result.report.notes(),
        "turns": turns,
        "tree": nodes,
        "drift": points,
        "samples": samples,
    }


def _reject_payload(reject: Reject) -> dict[str, Any]:
    where = f"{reject.file}, row {reject.row}" if reject.file is not None else ""
    return {
        "id": reject.session_id,
        "rejected": {"reason": reject.reason, "where": where},
        "header": {
            "reward": None,
            "finished": True,
            "turns": 0,
            "leaves": 0,
            "samples": 0,
            "trained_tokens": 0,
            "context_tokens": 0,
            "forks": {},
            "realigns": 0,
            "rewrite_merges": 0,
        },
        "fork_summary": "none",
        "notes": [],
    }


def _policy_flags(item: SessionResult | Reject) -> list[str] | None:
    """The row flags of POLICY_FLAGS that some sample of the session carries; ``None`` if its samples carry none."""
    if isinstance(item, Reject):
        return []
    carried = [s.flags for s in item.samples if s.flags is not None]
    if not carried:
        return None
    return [key for key, (flag, _) in POLICY_FLAGS.items() if any(f.get(flag) for f in carried)]


def _count(n: int, word: str) -> str:
    """``1 session``, ``2 sessions``."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def _table_row(row: dict[str, Any], policy_flags: list[str] | None = None) -> dict[str, Any]:
    cells = {}
    sort = {}
    for key in FIELDS:
        value = row[key]
        sort[key] = "" if value is None else value
        if value is None:
            cells[key] = ""
        elif isinstance(value, bool):
            cells[key] = "yes" if value else "no"
        elif key == "reward":
            cells[key] = f"{value:g}"
        elif key in _NUMERIC:
            cells[key] = f"{value:,}"
        else:
            cells[key] = str(value)
    flags = []
    if row["forks"]:
        flags.append("forked")
    if row["realigns"]:
        flags.append("realigned")
    if row["merges"]:
        flags.append("merged")
    if row["rejected"] is not None:
        flags.append("rejected")
    if not row["samples"]:
        flags.append("nosamples")
    if row["unfinished"]:
        flags.append("unfinished")
    flags += policy_flags or []
    hot = {key: bool(row[key]) for key in _HOT}
    hot["samples"] = row["samples"] == 0
    return {
        "session": row["session"],
        "href": quote(row["session"], safe="-_.!~*'()"),  # as the page's encodeURIComponent writes it
        "cells": cells,
        "sort": sort,
        "flags": flags,
        "hot": hot,
    }


def _special_ids(text: TokenText) -> list[int]:
    tokenizer = text.tokenizer
    if tokenizer is None:
        return []
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    for token_id, token in (getattr(tokenizer, "added_tokens_decoder", {}) or {}).items():
        if getattr(token, "special", False):
            ids.add(int(token_id))
    return sorted(ids)


def _script_json(value: Any) -> str:
    """JSON safe inside ``<script>``: log text holding ``</script>`` or ``<!--`` cannot end or bend the element.

    Every ``<`` is written ``\\u003c`` (the same string to ``JSON.parse``).
    """
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")


def view_page(
    items: Iterable[SessionResult | Reject],
    text: TokenText,
    *,
    title: str,
    policy: Policy,
    progress: Progress | None = None,
) -> str:
    """The whole page for ``items`` (rebuilt sessions and rejects, in the order the table starts in)."""
    sessions: dict[str, dict[str, Any]] = {}
    rows: list[dict[str, Any]] = []
    all_drift: list[Divergence] = []
    used: set[int] = set()
    flagged = False  # some sample carries policy flags: offer their filters

    def each() -> Iterator[SessionResult | Reject]:
        nonlocal flagged
        for item in items:
            policy_flags = _policy_flags(item)
            flagged = flagged or policy_flags is not None
            rows.append(_table_row(session_row(item), policy_flags))
            if isinstance(item, Reject):
                sessions[item.session_id] = _reject_payload(item)
            else:
                drift = divergences(item, text)
                all_drift.extend(drift)
                sessions[item.session_id] = _session_payload(item, drift, used)
            if progress is not None:
                progress(len(rows))
            yield item

    stats = corpus_stats(each(), policy).to_dict()
    data = {
        "decodes": text.decodes,
        "vocab": {str(i): text.raw(i) for i in sorted(used)} if text.decodes else {},
        # An id beyond the vocabulary shows its marker as it is, as a special token does.
        "special": _special_ids(text) + sorted(i for i in used if text.beyond(i)),
        "decision_legend": DECISION_LEGEND,
        "sessions": sessions,
    }
    f = stats["forks"]
    totals = [
        ("sessions", f"{stats['sessions']:,}", f"{stats['rebuilt']:,} rebuilt, {stats['rejected']:,} rejected"),
        ("turns", f"{stats['turns']:,}", f"{stats['skipped_turns']:,} skipped"),
        ("samples", f"{stats['samples']:,}", ""),
        ("trained tokens", f"{stats['tokens']['trained']:,}", "loss 1"),
        ("context tokens", f"{stats['tokens']['context']:,}", "loss 0 in response regions"),
        ("forks", f"{f['total']:,}", f"in {_count(f['sessions'], 'session')}"),
        ("realigns", f"{stats['realigns']['total']:,}", f"in {_count(stats['realigns']['sessions'], 'session')}"),
        ("rewrite merges", f"{stats['rewrite_merges']:,}", ""),
    ]
    return _render(
        title=title,
        policy=f"policy {policy_label(policy.describe())}",
        tokenizer=text.name or "none (token ids)",
        totals=totals,
        charts=_charts(stats, all_drift),
        flags=list(FLAGS.items()) + ([(key, label) for key, (_, label) in POLICY_FLAGS.items()] if flagged else []),
        columns=[(key, key, key in _NUMERIC) for key in FIELDS],
        rows=rows,
        css=_asset("view.css"),
        js=_asset("view.js"),
        data=_script_json(data),
    )
