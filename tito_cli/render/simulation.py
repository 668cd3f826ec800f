"""The closing summary of ``tito simulate``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the simulator is only imported by the simulate command
    from ..simulate import SimulationSummary

__all__ = ["render_simulation_summary"]

#: Simulator events, in the order shown, with their labels.
_EVENT_LABELS = {
    "parallel_tool_calls": "replies with parallel tool calls",
    "subagent": "sub-agents started",
    "compaction": "compactions",
    "abort": "aborted replies (resent)",
    "empty": "empty replies (resent)",
    "rewind": "rewinds (earlier prompt resent)",
    "rewrite_short": "client rewrites of short replies",
    "rewrite_long": "client rewrites of long replies",
    "reasoning": "replies with reasoning",
    "noncanonical": "replies with non-canonical ids",
    "noncanonical_long": "  of which drift ≥ 1024 tokens",
    "truncation": "replies cut at max_tokens",
    "followup": "follow-up questions after the task",
    "loose_json": "replies with tool-call JSON without spaces",
    "unfinished": "sessions without a sessions row",
}


def render_simulation_summary(summary: SimulationSummary) -> RenderableType:
    table = Table.grid(padding=(0, 2))
    table.add_column(justify="left")
    table.add_column(justify="right")

    def row(label: str, value: int) -> None:
        table.add_row(label, f"{value:,}")

    row("sessions", len(summary.sessions))
    row("turns", summary.turns)
    row("prompt tokens", summary.prompt_tokens)
    row("output tokens", summary.output_tokens)
    row("largest prompt", summary.max_prompt_tokens)
    events = summary.events
    for name, label in _EVENT_LABELS.items():
        if events.get(name):
            row(label, events[name])
    parts: list[RenderableType] = [table, Text("")]
    parts.append(
        Text(f"wrote {len(summary.files)} file(s) to {summary.out_dir} (tokenizer: {summary.tokenizer})", style="bold")
    )
    return Group(*parts)
