"""``tito inspect``: one session's header, turns and routing tree as rich renderables.

The facts come from :mod:`tito_cli.report.session_facts` (``--json`` prints
them as they are), so the text and the JSON always say the same thing.  The
samples view lives in ``sample_text``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..algorithm.policy import policy_label
from ..report.session_facts import FORK_LABELS, decision_text
from .visible import one_line

__all__ = [
    "DECISION_LEGEND",
    "render_header",
    "render_tree",
    "render_turns",
]

ROLE_STYLES = {"system": "magenta", "user": "cyan", "tool": "yellow", "assistant": "green"}

#: Printed under the turns table: what the numbers in a decision mean.
DECISION_LEGEND = (
    "at N: tokens the prompt shares with those held for its path; (-N): held tokens it does not repeat. "
    "A realign cuts them and continues the sample; a fork starts a new one."
)


# -- the renderers ----------------------------------------------------------


def render_header(header: dict[str, Any]) -> RenderableType:
    h = header
    line1 = Text()
    line1.append("session ", style="dim")
    line1.append(one_line(h["session_id"]), style="bold")
    reward = f"{h['reward']:g}" + ("" if h["finished"] else " (no sessions row)")
    line1.append(
        f"  reward {reward} · {plural(h['turns'], 'turn')} · {plural(h['leaves'], 'leaf', 'leaves')}"
        f" · {plural(h['samples'], 'sample')}"
    )
    forks = sum(h["forks"].values())
    by_cause = ", ".join(f"{FORK_LABELS[c]} {n}" for c, n in h["forks"].items() if n)
    line2 = Text(
        f"tokens trained {h['trained_tokens']:,} · context {h['context_tokens']:,}"
        f" · forks {forks}{f' ({by_cause})' if by_cause else ''}"
        f" · realigns {h['realigns']} · rewrite merges {h['rewrite_merges']}"
    )
    extra = []
    if h["skipped_turns"]:
        extra.append(f"{plural(h['skipped_turns'], 'turn')} skipped (empty prompt)")
    if h["dropped_segments"]:
        extra.append(f"{plural(h['dropped_segments'], 'segment')} without trained tokens dropped")
    if h["ambiguous_rewrites"]:
        extra.append(f"{plural(h['ambiguous_rewrites'], 'ambiguous rewrite')} not merged")
    if h.get("stale_samples"):
        extra.append(f"{plural(h['stale_samples'], 'sample')} trained on more than one weight version")
    if h.get("auxiliary_calls"):
        extra.append(f"{plural(h['auxiliary_calls'], 'auxiliary call')}")
    line0 = Text(f"policy {policy_label(h['policy'])}", style="dim")
    parts: list[RenderableType] = [line1, line2, line0]
    if extra:
        parts.append(Text(" · ".join(extra), style="yellow"))
    return Group(*parts)


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n:,} {word if n == 1 else many or word + 's'}"


def _sample_list(indices: list[int]) -> str:
    return ", ".join(str(i) for i in indices)


def decision_legend(realign_effect: str | None = None) -> str:
    """:data:`DECISION_LEGEND`, saying what a realign does when the policy's differs from cutting the drift."""
    if realign_effect is None:
        return DECISION_LEGEND
    return DECISION_LEGEND.replace(
        "A realign cuts them and continues the sample",
        f"A realign continues the sample ({realign_effect}: the latest response becomes prompt, loss 0)",
    )


def render_turns(rows: list[dict[str, Any]], realign_effect: str | None = None) -> RenderableType:
    return Group(_turns_table(rows), Text(decision_legend(realign_effect), style="dim"))


def _turns_table(rows: list[dict[str, Any]]) -> Table:
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("seq", justify="right")
    table.add_column("#", justify="right")
    table.add_column("finish")
    table.add_column("prompt", justify="right")
    table.add_column("output", justify="right")
    table.add_column("lp")
    table.add_column("decision", overflow="fold")
    table.add_column("trained in", overflow="fold")
    histories = any("history" in row for row in rows)
    if histories:  # captured by tito serve --history canonical
        table.add_column("history", overflow="fold")
    provenance = any("call_kind" in row for row in rows)
    if provenance:  # a log that recorded provenance (docs/spec.md §2)
        table.add_column("versions", overflow="fold")
        table.add_column("kind")
        table.add_column("experts", overflow="fold")
    for row in rows:
        d = row["decision"]
        style = None
        if row["status"] != "packed":
            style = "dim"
        elif d is not None and d["kind"] == "fork":
            style = "red"
        elif d is not None and d["kind"] == "realign":
            style = "yellow"
        trained = "—"
        if row["trained_in"]:
            trained = "sample " + _sample_list(row["trained_in"])
        elif row["status"] == "packed":
            trained = "nowhere"
        table.add_row(
            str(row["seq"]),
            str(row["turn_index"]) if row["turn_index"] is not None else "",
            row["finish_reason"] or "",
            f"{row['prompt_tokens']:,}" if row["prompt_tokens"] is not None else "",
            f"{row['output_tokens']:,}" if row["output_tokens"] is not None else "",
            ("yes" if row["logprobs"] else "no") if row["logprobs"] is not None else "",
            Text(decision_text(row), style=style or ""),
            trained,
            *([one_line(row.get("history") or "")] if histories else []),
            *(_provenance_cells(row) if provenance else []),
        )
    return table


def _provenance_cells(row: dict[str, Any]) -> list[RenderableType]:
    """A turn's weight versions (a change mid-call in yellow), call kind and routed experts."""
    if "call_kind" not in row:
        return ["", "", ""]
    versions = row["versions"]
    shown = Text(one_line(" → ".join(versions)) or "—", style="yellow" if len(set(versions)) > 1 else "")
    kind = Text(row["call_kind"], style="dim" if row["call_kind"] == "auxiliary" else "")
    experts = row["routed_experts"] or "—"
    return [shown, kind, Text(experts, style="red" if experts.startswith("missing") else "")]


@dataclass(slots=True)
class _Pending:
    tree: Tree
    node_id: int


def _node_line(n: dict[str, Any]) -> Text:
    """One tree node on one line; the message preview comes last, so cropping costs only preview."""
    line = Text(no_wrap=True, overflow="ellipsis")
    if n["branch"] is not None:
        line.append(f"⑂ {n['branch']}  ", style="bold yellow")
    role = n["role"] or "?"
    line.append(f"{role:<9}", style=ROLE_STYLES.get(role, ""))
    line.append(" ")
    if n["kind"] == "generated":
        line.append(f"seq {n['seq']} #{n['turn_index']}", style="bold green")
        line.append(f" in {n['prompt_tokens']:,} out {n['output_tokens']:,} {n['finish_reason']}", style="green")
        d = n["decision"]
        if d is not None and d["kind"] == "realign":
            line.append(f" realign at {d['lcp']:,} (-{d['drift']:,})", style="yellow")
        elif d is not None and d["kind"] == "fork":
            line.append(f" fork: {FORK_LABELS[d['cause']]}", style="red")
        line.append("  ")
    elif n["kind"] == "merged":
        m = n["merged_rewrite"]
        line.append(
            f"⇄ rewrite of seq {m['abandoned_seq']} merged ({m['abandoned_response_tokens']} tok abandoned)",
            style="bold magenta",
        )
        line.append("  ")
    elif role == "assistant":
        line.append("echo, routing only, never trained", style="magenta")
        line.append("  ")
    if n["tools"]:
        line.append(f"[{n['tools']} tools] ", style="dim")
    line.append(n["preview"], style="dim" if n["kind"] != "generated" else "")
    return line


def _leaf_line(n: dict[str, Any]) -> Text:
    """Under a leaf: which samples its chain produced (on its own line, so it is never cropped)."""
    samples = n["samples"]
    target = f"sample{'s' if len(samples) > 1 else ''} {_sample_list(samples)}" if samples else "no sample"
    return Text(f"{'':<10}⤷ leaf {n['leaf']} → {target}", style="bold cyan", no_wrap=True, overflow="ellipsis")


def render_tree(session_id: str, nodes: list[dict[str, Any]]) -> RenderableType:
    """The routing tree with linear runs kept flat: indentation only where the tree branches.

    A session of 100 turns is a path of hundreds of messages; nesting each
    message under the previous one would push it off any screen.
    """
    children: dict[int | None, list[int]] = {}
    for n in nodes:
        children.setdefault(n["parent"], []).append(n["id"])
    top = Tree(Text(one_line(session_id), style="bold"), guide_style="dim")
    # Each pending entry opens a run at node_id, rendered as one tree item
    # (several lines), whose branching children become nested items.
    stack = [_Pending(top, nid) for nid in reversed(children.get(None, []))]
    while stack:
        item = stack.pop()
        lines = [_node_line(nodes[item.node_id])]
        current = item.node_id
        while len(children.get(current, [])) == 1:
            current = children[current][0]
            lines.append(_node_line(nodes[current]))
        if nodes[current]["leaf"] is not None:
            lines.append(_leaf_line(nodes[current]))
        branch = item.tree.add(Group(*lines))
        stack.extend(_Pending(branch, c) for c in reversed(children.get(current, [])))
    return top
