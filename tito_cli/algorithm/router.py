"""Routing (SPEC §3): fold a session's turns into a message tree.

Each node holds one chat message.  A *generated* node also holds the turn
that produced it; every other node is *routing-only*.  Prompts are matched
message by message from the root, so a resent prompt becomes a sibling leaf,
a new system prompt (a sub-agent) or a compacted restart starts a new
subtree, and an assistant echo that no generated node produced is mounted
routing-only and never trained.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..turns import Turn
from .policy import Policy
from .tree import MergedRewrite, Node, SessionTree

__all__ = ["route"]


def route(turns: Iterable[Turn], policy: Policy) -> SessionTree:
    """Build the routing tree of one session from its turns in ``seq`` order."""
    tree = SessionTree(root=Node(role=None, message=None, key=None))
    message_key = policy.message_key
    prompt_ends: dict[int, Node] = {}  # id(turn) -> the node its prompt's last message is at
    for turn in turns:
        messages = turn.prompt_messages
        if not messages:
            tree.skipped.append(turn.seq)
            continue
        keys = turn.keys(message_key)

        # Find the mount point: the deepest node matching a prefix of the prompt.
        node = tree.root
        i = 0
        if turn.extends is not None:
            # The prompt starts with all of an earlier turn's prompt messages.  The
            # nodes that prompt matched or mounted still match it: children are only
            # appended, and a rekeyed (absorbed) node is a leaf, while every node on
            # a routed prompt's path has a child.  So start where that prompt ended.
            earlier, shared = turn.extends
            end = prompt_ends.get(id(earlier))
            if end is not None and shared == len(earlier.prompt_messages):
                node, i = end, shared
        while i < len(messages):
            child = node.find_child(messages[i].get("role"), keys[i])
            if child is None:
                break
            node = child
            i += 1

        # A short assistant rewrite is absorbed by the one node the policy names.
        if i < len(messages):
            candidates = policy.rewrite_candidates(node, messages[i])
            if len(candidates) == 1:
                absorbed = candidates[0]
                old_turn = absorbed.turn
                assert old_turn is not None and absorbed.turn_index is not None
                absorbed.merged_rewrite = MergedRewrite(
                    abandoned_turn_index=absorbed.turn_index,
                    abandoned_response_tokens=len(old_turn.output_ids),
                    abandoned_seq=old_turn.seq,
                )
                absorbed.turn = None
                node.rekey_child(absorbed, messages[i], keys[i])
                tree.merges.append(absorbed)
                node = absorbed
                i += 1
            elif len(candidates) > 1:
                tree.ambiguous_rewrites.append(turn.seq)

        # Mount the rest of the prompt routing-only, one below the other.
        tools_pending = turn.tools is not None
        for message, key in zip(messages[i:], keys[i:], strict=True):
            role = message.get("role")
            child = Node(role=role, message=message, key=key)
            if tools_pending and role == "system":
                child.tools = turn.tools
                tools_pending = False
            node = node.add_child(child)

        prompt_ends[id(turn)] = node

        # Attach the turn as a new generated leaf.
        response = turn.response_message
        tree.turns.append(turn)
        node.add_child(
            Node(
                role="assistant",
                message=response,
                key=turn.response_key(message_key),
                turn=turn,
                turn_index=len(tree.turns),
            )
        )
    return tree
