"""``tito inspect``: one session's turns and routing tree, as data and as rich renderables.

Every view is built in two steps: a plain, JSON-able description of the
session (``turn_rows``, ``tree_nodes``), then a renderer that lays it out
for a person.  ``--json`` prints the first step, so the text and the JSON
always say the same thing.  The samples view lives in ``sample_text``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from ..algorithm.linearize import Decision
from ..algorithm.policy import ForkCause, policy_label
from ..algorithm.router import Node
from ..algorithm.session import SessionResult
from .describe import message_preview, node_kind
from .visible import one_line

__all__ = [
    "DECISION_LEGEND",
    "FORK_LABELS",
    "decision_text",
    "render_header",
    "render_tree",
    "render_turns",
    "session_header",
    "tree_nodes",
    "turn_rows",
]

FORK_LABELS = {
    ForkCause.PROMPT_REGION.value: "prompt region",
    ForkCause.BEFORE_LATEST_RESPONSE.value: "before latest response",
    ForkCause.DRIFT_TOO_LONG.value: "drift too long",
    ForkCause.OUTPUT_TOO_LONG.value: "output too long to realign",
}

ROLE_STYLES = {"system": "magenta", "user": "cyan", "tool": "yellow", "assistant": "green"}


# -- the facts --------------------------------------------------------------


def session_header(result: SessionResult) -> dict[str, Any]:
    r = result.report
    return {
        "session_id": result.session_id,
        "policy": result.policy.describe(),
        "reward": result.info.reward,
        "finished": result.info.finished,
        "turns": r.turns,
        "skipped_turns": r.skipped_turns,
        "leaves": r.leaves,
        "samples": r.samples,
        "dropped_segments": r.dropped_segments,
        "trained_tokens": r.trained_tokens,
        "context_tokens": r.context_tokens,
        "forks": dict(sorted(r.forks.items())),
        "realigns": r.realigns,
        "rewrite_merges": r.rewrite_merges,
        "ambiguous_rewrites": r.ambiguous_rewrites,
    }


def _first_decisions(decisions: Iterable[Decision]) -> dict[int, Decision]:
    """The decision for each turn, from the first leaf that packed it.

    Every leaf through a generated node packs the same chain up to it, from
    an empty segment, so all leaves reach the same decision there; only
    ``trained`` differs (a turn is trained by its first leaf).
    """
    first: dict[int, Decision] = {}
    for d in decisions:
        first.setdefault(d.seq, d)
    return first


def _rewritten_by(merged: Node) -> int | None:
    """The seq of the turn that absorbed a rewrite: the first generated turn below the merged node."""
    seqs = [n.turn.seq for n in merged.walk() if n.turn is not None]
    return min(seqs) if seqs else None


def turn_rows(result: SessionResult) -> list[dict[str, Any]]:
    """One row per turn in seq order: lengths, finish reason and the linearizer's decision."""
    tree = result.tree
    decisions = _first_decisions(result.linearization.decisions)
    index_of = {t.seq: i + 1 for i, t in enumerate(tree.turns)}
    rewritten = {
        n.merged_rewrite.abandoned_seq: (_rewritten_by(n), n.merged_rewrite.abandoned_response_tokens)
        for n in tree.merges
        if n.merged_rewrite is not None
    }
    trained_in: dict[int, list[int]] = {}
    context_in: dict[int, list[int]] = {}
    for i, sample in enumerate(result.samples):
        # Trained here: claimed by this sample, unless a realign masked all of its output.
        trained = {
            span.turn.seq
            for span in sample.spans
            if span.trained and (span.end > span.start or not len(span.turn.output_ids))
        }
        for seq in sample.seqs:
            (trained_in if seq in trained else context_in).setdefault(seq, []).append(i)

    # Skipped turns never reach the tree; they are listed with the others, in seq order.
    turns = {t.seq: t for t in tree.turns}
    rows: list[dict[str, Any]] = []
    for seq in sorted(set(turns) | set(tree.skipped)):
        turn = turns.get(seq)
        row: dict[str, Any] = {"seq": seq, "turn_index": index_of.get(seq)}
        if turn is None:
            row.update(
                status="skipped",
                finish_reason=None,
                prompt_tokens=None,
                output_tokens=None,
                logprobs=None,
                decision=None,
            )
        else:
            decision = decisions.get(seq)
            status = "rewritten" if seq in rewritten else "packed"
            row.update(
                status=status,
                finish_reason=turn.finish_reason,
                prompt_tokens=len(turn.prompt_ids),
                output_tokens=len(turn.output_ids),
                logprobs=turn.output_logprobs is not None,
                decision=_decision_dict(decision, result),
            )
        if seq in rewritten:
            by, tokens = rewritten[seq]
            row["rewritten_by"] = by
            row["abandoned_tokens"] = tokens
        else:
            row["rewritten_by"] = None
            row["abandoned_tokens"] = None
        row["trained_in"] = trained_in.get(seq, [])
        row["context_in"] = context_in.get(seq, [])
        rows.append(row)
    return rows


def _decision_dict(decision: Decision | None, result: SessionResult) -> dict[str, Any] | None:
    if decision is None:
        return None
    return {
        "kind": decision.kind,
        "lcp": decision.lcp,
        "drift": decision.drift,
        "cause": decision.cause.value if decision.cause is not None else None,
        # What the policy's realign does to the latest response (slime-0.3: the whole of it is masked).
        "effect": result.policy.realign_effect if decision.kind == "realign" else None,
    }


def short_decision(d: dict[str, Any]) -> str:
    """``start``, ``clean``, ``realign at 81 (-27)``, ``fork: prompt region at 12 (-300)``."""
    if d["kind"] in ("start", "clean"):
        return str(d["kind"])
    where = f"at {d['lcp']:,} (-{d['drift']:,})"
    if d["kind"] == "realign":
        effect = d.get("effect")
        return f"realign {where}" + (f": {effect}" if effect else "")
    return f"fork: {FORK_LABELS[d['cause']]} {where}"


def decision_text(row: dict[str, Any]) -> str:
    """How a turn's prompt related to the tokens held before it, in a few words."""
    if row["status"] == "skipped":
        return "skipped: empty prompt_messages"
    if row["status"] == "rewritten":
        return f"rewritten by seq {row['rewritten_by']} ({row['abandoned_tokens']:,} tok abandoned)"
    d = row["decision"]
    if d is None:  # pragma: no cover - every packed turn has a decision
        return "?"
    if d["kind"] == "start":
        return "start: first turn on its path"
    if d["kind"] == "clean":
        return "clean: extends held tokens"
    return short_decision(d)


#: Printed under the turns table: what the numbers in a decision mean.
DECISION_LEGEND = (
    "at N: tokens the prompt shares with those held for its path; (-N): held tokens it does not repeat. "
    "A realign cuts them and continues the sample; a fork starts a new one."
)


def _branch_kind(parent: Node, child: Node) -> str:
    """Why the tree splits at ``parent`` (a guess from roles, for the reader; the algorithm does not care)."""
    if parent.parent is None:
        return "sub-agent" if child.role == "system" and child.position > 0 else "main"
    if child.role == "assistant":
        if child.turn is None and child.merged_rewrite is None:
            return "history rewritten"
        return "retry" if child.position > 0 else "first try"
    if child.position == 0:
        return "original"
    if parent.role == "system":
        return "restart (compaction?)"
    return "history diverges"


def tree_nodes(result: SessionResult) -> list[dict[str, Any]]:
    """The routing tree, flat in depth-first order: each node names its parent by id."""
    leaf_of = {id(leaf): i for i, leaf in enumerate(result.tree.leaves())}
    decisions = _first_decisions(result.linearization.decisions)
    samples_of: dict[int, list[int]] = {}
    for i, sample in enumerate(result.samples):
        samples_of.setdefault(sample.leaf, []).append(i)
    ids: dict[int, int] = {}
    nodes: list[dict[str, Any]] = []
    for node in result.tree.root.walk():
        if node.parent is None:
            continue
        ids[id(node)] = len(nodes)
        parent = node.parent
        turn = node.turn
        merged = node.merged_rewrite
        leaf = leaf_of.get(id(node))
        nodes.append(
            {
                "id": len(nodes),
                "parent": ids.get(id(parent)),
                "role": node.role,
                "kind": node_kind(node),
                "preview": message_preview(node.message, width=200),
                "seq": turn.seq if turn is not None else None,
                "turn_index": node.turn_index if turn is not None else None,
                "prompt_tokens": len(turn.prompt_ids) if turn is not None else None,
                "output_tokens": len(turn.output_ids) if turn is not None else None,
                "finish_reason": turn.finish_reason if turn is not None else None,
                "decision": _decision_dict(decisions.get(turn.seq), result) if turn is not None else None,
                "merged_rewrite": None
                if merged is None
                else {
                    "abandoned_seq": merged.abandoned_seq,
                    "abandoned_turn_index": merged.abandoned_turn_index,
                    "abandoned_response_tokens": merged.abandoned_response_tokens,
                },
                "tools": len(node.tools) if isinstance(node.tools, list) else None,
                "branch": _branch_kind(parent, node) if len(parent.children) > 1 else None,
                "leaf": leaf,
                "samples": samples_of.get(leaf, []) if leaf is not None else [],
            }
        )
    return nodes


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
        )
    return table


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
