"""``tito inspect``'s drift view: each fork and realign, where it diverged, and the two texts there."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from ..report.drift import Divergence
from ..report.session_facts import FORK_LABELS

__all__ = ["DIVERGENCE_MARK", "divergence_lines", "divergence_parts", "render_drift"]

#: Stands between the tokens both sides share and the first that differ.
DIVERGENCE_MARK = " ▸ "
#: Characters shown before the mark and after it (``--json`` has the whole windows).
_SHARED_CHARS = 32
_DIFFERING_CHARS = 48


def divergence_parts(item: Divergence) -> tuple[str, str, str, str]:
    """A heading, the shared text before the divergence, and what follows it on each side (held, prompt)."""
    where = f"at {item.index:,} (-{item.drift:,})"
    kind = f"fork: {FORK_LABELS[item.cause]}" if item.cause is not None else "realign"
    heading = f"seq {item.seq}  {kind} {where}  {item.drift_class}"
    if item.shared_text is not None and item.held_text is not None and item.prompt_text is not None:
        shared = item.shared_text
        if len(shared) > _SHARED_CHARS:
            shared = "…" + shared[-_SHARED_CHARS:]
        held, prompt = (_clip(t) for t in (item.held_text, item.prompt_text))
    else:
        common = item.index - item.window_start
        shared = " ".join(map(str, item.held_ids[:common]))
        held = " ".join(map(str, item.held_ids[common:]))
        prompt = " ".join(map(str, item.prompt_ids[common:]))
    return heading, shared, held, prompt


def _clip(text: str) -> str:
    return text if len(text) <= _DIFFERING_CHARS else text[:_DIFFERING_CHARS] + "…"


def divergence_lines(item: Divergence) -> tuple[str, str, str]:
    """A heading and the held / prompt lines of one divergence, as plain text."""
    heading, shared, held, prompt = divergence_parts(item)
    return heading, f"held    {shared}{DIVERGENCE_MARK}{held}", f"prompt  {shared}{DIVERGENCE_MARK}{prompt}"


def render_drift(items: Sequence[Divergence]) -> RenderableType:
    if not items:
        return Text("no forks or realigns: every prompt extends the tokens held for its path", style="dim")
    parts: list[RenderableType] = []
    for item in items:
        heading, shared, held, prompt = divergence_parts(item)
        parts.append(Text(heading, style="red" if item.kind == "fork" else "yellow"))
        for label, differs in (("held  ", held), ("prompt", prompt)):
            text = Text(f"  {label}  ", style="bold")
            text.append(shared, style="dim")
            text.append(DIVERGENCE_MARK)
            text.append(differs)
            parts.append(text)
    parts.append(Text("▸ marks the first token that differs; ␣ ↵ ⇥ are space, newline, tab.", style="dim"))
    return Group(*parts)
