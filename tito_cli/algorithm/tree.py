"""The routing tree (SPEC §3): nodes holding one chat message each, and a session's tree of them.

Each node holds one chat message.  A *generated* node also holds the turn
that produced it; every other node is *routing-only*.  The router
(:mod:`.router`) builds the tree; the linearizer, the policies and the views
read it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..turns import Message, MessageKey, Turn

__all__ = ["MergedRewrite", "Node", "SessionTree"]


@dataclass(frozen=True, slots=True)
class MergedRewrite:
    """A short assistant rewrite absorbed by the generated node it replaced."""

    abandoned_turn_index: int
    abandoned_response_tokens: int
    abandoned_seq: int


@dataclass(eq=False, slots=True)
class Node:
    role: str | None
    message: Message | None
    #: Identity of ``message`` (turns.message_key); ``None`` matches nothing (a generated
    #: node whose response message is null, and the root).
    key: MessageKey | None
    parent: Node | None = None
    #: Position among the parent's children: "first child" means lowest position.
    position: int = 0
    children: list[Node] = field(default_factory=list)
    turn: Turn | None = None
    turn_index: int | None = None
    merged_rewrite: MergedRewrite | None = None
    #: Tool specs of the turn that mounted a system node (informational only).
    tools: Any = None
    #: Children by (role, key), each list in insertion order.
    _index: dict[tuple[str | None, MessageKey], list[Node]] = field(default_factory=dict, repr=False)

    @property
    def generated(self) -> bool:
        return self.turn is not None

    def find_child(self, role: str | None, key: MessageKey) -> Node | None:
        matches = self._index.get((role, key))
        return matches[0] if matches else None

    def add_child(self, child: Node) -> Node:
        child.parent = self
        child.position = len(self.children)
        self.children.append(child)
        if child.key is not None:
            self._index.setdefault((child.role, child.key), []).append(child)
        return child

    def rekey_child(self, child: Node, message: Message, key: MessageKey) -> None:
        """Give ``child`` (an absorbed rewrite) the message it absorbed, and its key."""
        if child.key is not None:
            self._index[(child.role, child.key)].remove(child)
        child.message = message
        child.key = key
        # A rewrite is absorbed only when no sibling matched the message, so
        # no sibling holds this key yet and appending keeps insertion order.
        self._index.setdefault((child.role, child.key), []).append(child)

    def walk(self) -> Iterator[Node]:
        """This node and its descendants, depth-first, children in insertion order."""
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def chain(self) -> list[Node]:
        """The path from the root's child down to this node."""
        path: list[Node] = []
        node: Node | None = self
        while node is not None and node.parent is not None:
            path.append(node)
            node = node.parent
        path.reverse()
        return path


@dataclass(slots=True)
class SessionTree:
    root: Node
    #: Turns attached, in seq order (absorbed ones included); turn index = position + 1.
    turns: list[Turn] = field(default_factory=list)
    #: Seqs of turns skipped because their prompt had no messages.
    skipped: list[int] = field(default_factory=list)
    #: Nodes that absorbed a short rewrite, in the order it happened.
    merges: list[Node] = field(default_factory=list)
    #: Seqs of turns whose first unmatched assistant message had several
    #: rewrite candidates (nothing absorbed; worth a warning).
    ambiguous_rewrites: list[int] = field(default_factory=list)

    def leaves(self) -> list[Node]:
        return [n for n in self.root.walk() if not n.children and n is not self.root]

    def release(self) -> None:
        """Break the nodes' parent/child cycles once the session is done with.

        The nodes hold the turns, whose ids are views into decoded row groups.
        Without cycles, reference counting frees them as soon as the session is
        done, instead of at the next full garbage collection, which may come
        many sessions (hundreds of megabytes) later.  The tree is empty after.
        """
        for node in list(self.root.walk()):
            node.parent = None
            node.children = []
            node._index = {}
