"""A sample's tokens as a person reads them: regions labelled by turn, trained tokens marked.

The regions come from :func:`tito_cli.report.session_facts.samples_data`
(the linearizer's spans, so the marks shown are the sample's loss mask, not a
re-derivation of it).

Trained tokens are shown in colour on a terminal, or between ``[`` and ``]``
in plain text (the form golden strings use).  Whitespace is made visible
(``␣ ↵ ⇥``); a line break follows each ``↵`` so code stays readable.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from ..report.session_facts import FORK_LABELS
from ..tokenizer import TokenText

__all__ = ["render_samples", "seq_ranges"]

#: Context runs longer than this are shown as head, a count, and tail (unless --full).
COLLAPSE_OVER = 48
COLLAPSE_KEEP = 12

TRAINED_STYLE = "bold green"
LABEL_STYLE = "dim cyan"


def _body(text: TokenText, ids: list[int], trained: bool, brackets: bool) -> Text:
    """Token text of one run; trained runs are styled, and bracketed in plain text."""
    if text.decodes:
        shown = text.text(ids).replace("↵", "↵\n")
        shown = shown[:-1] if shown.endswith("\n") else shown
    else:
        shown = " ".join(str(i) for i in ids)
    if trained and brackets:
        shown = f"[{shown}]"
    body = Text(shown, style=TRAINED_STYLE if trained else "")
    body.highlight_regex("[␣↵⇥]", "dim")  # the text stays in front; the markers recede
    return body


def _focused(text: TokenText, ids: list[int], k: int, trained: bool, brackets: bool) -> Text:
    """A run with token ``k`` marked (``--around``): reversed on a terminal, between ``⟦ ⟧`` in plain text."""
    gap = "" if text.decodes else " "
    out = Text()
    if k:
        out.append_text(_body(text, ids[:k], trained, brackets))
        # _body drops the line break after a final ↵; the run goes on here, so it is put back.
        out.append("\n" if text.decodes and text.piece(ids[k - 1]).endswith("↵") else gap)
    token = text.piece(ids[k]) if text.decodes else str(ids[k])
    marked = f"⟦{token}⟧" if brackets else token
    out.append(f"[{marked}]" if trained and brackets else marked, style="reverse bold")
    if k + 1 < len(ids):
        out.append("\n" if token.endswith("↵") else gap)
        out.append_text(_body(text, ids[k + 1 :], trained, brackets))
    return out


def _label_text(label: str) -> Text:
    return Text(label, style=LABEL_STYLE, no_wrap=True, overflow="ellipsis")


def _label(region: dict[str, Any], after_cut: bool, cut_at: int | None = None) -> str:
    n = region["end"] - region["start"]
    if region["kind"] == "first_prompt":
        return f"── seq {region['seq']} first prompt · {n:,} tokens"
    if region["kind"] == "prompt":
        realign = f" from {region['start']:,} (realigned)" if after_cut else ""
        return f"── seq {region['seq']} prompt · {n:,} new tokens{realign} · context"
    what = "trained" if region["trained"] else "context (trained elsewhere)"
    label = f"── seq {region['seq']} output · {n:,} tokens · {what}"
    if region["generated"] is not None and cut_at is not None and region["end"] == cut_at:
        label += f" · {region['generated'] - n:,} of {region['generated']:,} cut by max_sample_tokens"
    elif region["generated"] is not None and n == 0:
        label += f" · whole response masked by the next turn's realign ({region['generated']:,} tokens, now prompt)"
    elif region["generated"] is not None:
        label += f" · {region['generated'] - n:,} of {region['generated']:,} cut by the next turn's realign"
    return label


def seq_ranges(seqs: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``0-2, 5, 7-8``: long sessions pack dozens of turns into one sample."""
    parts: list[str] = []
    i = 0
    while i < len(seqs):
        j = i
        while j + 1 < len(seqs) and seqs[j + 1] == seqs[j] + 1:
            j += 1
        parts.append(str(seqs[i]) if i == j else f"{seqs[i]}-{seqs[j]}")
        i = j + 1
    return ", ".join(parts) or "none"


def _sample_heading(s: dict[str, Any]) -> list[Text]:
    """Three lines that never wrap (a wrapped heading would read as token text)."""
    first = Text(no_wrap=True, overflow="ellipsis")
    first.append(f"sample {s['index']}", style="bold")
    first.append(f"  leaf {s['leaf']} segment {s['segment']} · reward {s['reward']:g}")
    if s["fork"] is not None:
        first.append(f" · starts at a fork ({FORK_LABELS[s['fork']]})", style="red")
    counts = Text(
        f"  {s['tokens']:,} tokens = first prompt {s['first_prompt_length']:,}"
        f" + response {s['response_length']:,} ({s['trained_tokens']:,} trained)",
        style="dim",
        no_wrap=True,
        overflow="ellipsis",
    )
    turns = Text(
        f"  turns {seq_ranges(s['turns'])} · trained {seq_ranges(s['trained_turns'])}",
        style="dim",
        no_wrap=True,
        overflow="ellipsis",
    )
    lines = [first, counts, turns]
    if s["flags"] is not None:
        on = [name for name, value in s["flags"].items() if value]
        lines.append(Text(f"  flags {' · '.join(on) if on else 'none'}", style="dim", no_wrap=True))
    shown = s.get("shown") or {}
    if shown.get("tokens") is not None:
        lo, hi = shown["tokens"]
        lines.append(Text(f"  showing tokens {lo:,}–{hi:,} of {s['tokens']:,}", style="dim", no_wrap=True))
    if shown.get("turns") is not None:
        lo, hi = shown["turns"]
        lines.append(Text(f"  showing turns {lo}–{hi}", style="dim", no_wrap=True))
    return lines


def render_samples(
    data: list[dict[str, Any]], text: TokenText, *, full: bool = False, brackets: bool = False
) -> RenderableType:
    """The samples view from :func:`samples_data`.

    Without ``full`` the first prompt is a one-line summary and long context
    runs show only their head and tail with a count; trained tokens are
    always shown whole.
    """
    if not data:
        return Text("no samples: nothing trained after a first prompt", style="yellow")
    parts: list[RenderableType] = []
    for s in data:
        if parts:
            parts.append(Text(""))
        parts.extend(_sample_heading(s))
        after_cut = False
        for region in s["regions"]:
            ids = region["ids"]
            if region["kind"] == "first_prompt" and not full:
                parts.append(
                    Text(
                        f"┄ seq {region['seq']} first prompt: {len(ids):,} tokens, not shown ┄",
                        style=LABEL_STYLE,
                    )
                )
                continue
            parts.append(Text(_label(region, after_cut, s["cut_at"]), style=LABEL_STYLE))
            after_cut = region["generated"] is not None
            if not ids:
                continue
            if not region["trained"] and not full and len(ids) > COLLAPSE_OVER:
                hidden = len(ids) - 2 * COLLAPSE_KEEP
                parts.append(_body(text, ids[:COLLAPSE_KEEP], False, brackets))
                parts.append(_label_text(f"┄ {hidden:,} context tokens not shown ┄"))
                parts.append(_body(text, ids[-COLLAPSE_KEEP:], False, brackets))
            else:
                focus = (s.get("shown") or {}).get("focus")
                if focus is not None and region["start"] <= focus < region["end"]:
                    parts.append(_focused(text, ids, focus - region["start"], region["trained"], brackets))
                else:
                    parts.append(_body(text, ids, region["trained"], brackets))
    return Group(*parts)
