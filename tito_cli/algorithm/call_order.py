"""The call-order chain: a session's turns hung one below the other, for a policy that does not route.

TRL's reconciler (``--policy trl``) reads a conversation as the list of its
generation calls in the order they were made; it never compares messages.
This builds that as a tree the linearizer packs like any other: one leaf
whose chain is every turn in ``seq`` order, each node the turn's response
message.  Nothing is skipped (a prompt without messages still has its ids)
and nothing is merged.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..turns import Turn
from .tree import Node, SessionTree

__all__ = ["call_order_tree"]


def call_order_tree(turns: Iterable[Turn]) -> SessionTree:
    """One chain of generated nodes, the turns in ``seq`` order (no routing, SPEC §3 does not apply)."""
    tree = SessionTree(root=Node(role=None, message=None, key=None))
    node = tree.root
    for turn in turns:
        tree.turns.append(turn)
        node = node.add_child(
            Node(role="assistant", message=turn.response_message, key=None, turn=turn, turn_index=len(tree.turns))
        )
    return tree
