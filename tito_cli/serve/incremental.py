"""A rendered prompt tokenized by pieces, each piece's ids kept per session: only what changed is encoded.

A fast tokenizer splits its input at its added tokens before anything else (normalizer, pre-tokenizer,
model): the text between two added tokens is tokenized on its own, and nothing merges across one.  So a
prompt cut just before each occurrence of an added token (a *mark*: ``<|im_start|>``, ``<|im_end|>``,
``<|start_header_id|>``, ...) tokenizes to the concatenation of its pieces' ids, whatever the pieces are.
A chat template renders a conversation as a run of such pieces, and a session's next prompt repeats
most of the previous one's: the pieces seen in the session's previous prompt keep their ids (looked up by
their text, so a template that rewrites earlier history, dropping old reasoning, costs only the
rewritten pieces), and the others are encoded in one batch call (:func:`batch_encoder`), which releases the GIL.

A mark is an added token the split cannot move: not ``lstrip`` (it would take whitespace from the piece
before it), not ``single_word`` (its match depends on the character before it), not ``normalized``
(matched after normalization, not on the text), and not found inside another added token after that
token's first character (a longer match starting earlier could swallow its start; an added token
ending in the first characters of a mark would too: no tokenizer here has one, and the equality tests
would show it).  Text a user typed
that spells a mark is a mark to the tokenizer too (the gateway renders it verbatim, and whole-text
tokenization makes it the special token): the pieces agree with it.

Held per session: the previous prompt's pieces with their ids and their JSON text (sent upstream as is),
at most ``max_sessions`` sessions and ``max_chars`` characters of pieces (64 Mi: about 3.5 bytes held
per character with the ids and their text), least recently used forgotten first; a finished session is
forgotten at once.  A session dropped by the bound costs its next prompt a whole encode, never an id.
``tests/serve/test_serve_incremental.py`` compares the result against whole-text tokenization for every
family's tokenizer here.
"""

from __future__ import annotations

import re
import threading
from array import array
from collections import OrderedDict
from typing import Any

import msgspec

__all__ = ["PieceEncoder", "batch_encoder", "marks_of"]

#: One piece: its ids and their JSON text without brackets ("" for no ids).
_Piece = tuple["array[int]", str]


def batch_encoder(backend: Any) -> Any:
    """``backend``'s batch encoding that releases the GIL and skips the offsets where it can.

    ``encode_batch_fast`` (tokenizers 0.21 on) gives the same ids as ``encode_batch`` without computing
    each token's character offsets, which no prompt uses: about a quarter less CPU per text (Qwen3, a
    12 kB tool result: 3.0 ms, not 4.0).  Older tokenizers have only ``encode_batch``.
    """
    return getattr(backend, "encode_batch_fast", None) or backend.encode_batch


def marks_of(backend: Any) -> list[str]:
    """The added tokens of ``backend`` (a ``tokenizers.Tokenizer``) a prompt can be cut before."""
    added = [token for token in backend.get_added_tokens_decoder().values() if token.content]
    marks = []
    for token in added:
        if token.lstrip or token.single_word or token.normalized:
            continue
        marks.append(token.content)
    # A mark inside another added token (the tokenizer may match that one, starting elsewhere) is not
    # a cut, unless that token is a mark too and begins with it (the longest mark is then the cut).
    unsafe = {
        mark for mark in marks for other in added
        if other.content != mark and (other.content.find(mark, 1) > 0
                                      or (other.content.startswith(mark) and other.content not in marks))
    }
    return sorted(set(marks) - unsafe)


def _pattern(marks: list[str]) -> str:
    """A regex matching any of ``marks``, longest first, as a trie (tokenizers have hundreds of marks)."""
    trie: dict[str, Any] = {}
    for mark in marks:
        node = trie
        for char in mark:
            node = node.setdefault(char, {})
        node[""] = {}

    def branch(node: dict[str, Any]) -> str:
        ends = "" in node
        options = [re.escape(char) + branch(child) for char, child in sorted(node.items()) if char]
        if not options:
            return ""
        body = options[0] if len(options) == 1 else "(?:" + "|".join(options) + ")"
        return f"(?:{body})?" if ends else body

    return branch(trie)


class PieceEncoder:
    """Tokenizes a session's prompts by pieces, reusing the ids of pieces its previous prompt had.

    Thread-safe: the held pieces are replaced whole under a lock, and encoding runs outside it.
    """

    def __init__(self, backend: Any, *, max_sessions: int = 4096, max_chars: int = 64 << 20) -> None:
        if max_sessions < 1 or max_chars < 1:
            raise ValueError("max_sessions and max_chars must be positive")
        self.backend = backend
        self._encode_batch = batch_encoder(backend)
        self.marks = marks_of(backend)
        self._find = re.compile(_pattern(self.marks)) if self.marks else None
        self.max_sessions = max_sessions
        self.max_chars = max_chars
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, tuple[dict[str, _Piece], int]] = OrderedDict()
        self._chars = 0

    def pieces(self, text: str) -> list[str]:
        """``text`` cut before each mark (the first piece may be empty; joined, they are ``text``)."""
        if self._find is None:
            return [text]
        starts = [match.start() for match in self._find.finditer(text)]
        return [text[a:b] for a, b in zip([0, *starts], [*starts, len(text)], strict=True)]

    def encode(self, session_id: str | None, text: str) -> tuple[array[int], str]:
        """``text``'s ids (as whole-text encoding gives them) and their JSON array text."""
        pieces = self.pieces(text)
        with self._lock:
            entry = self._sessions.get(session_id) if session_id is not None else None
        held = entry[0] if entry is not None else {}
        missing = list(dict.fromkeys(p for p in pieces if p and p not in held))
        known: dict[str, _Piece] = {}
        if missing:
            for piece, encoding in zip(missing, self._encode_batch(missing, add_special_tokens=False),
                                       strict=True):
                listed = encoding.ids
                known[piece] = (array("i", listed), msgspec.json.encode(listed)[1:-1].decode())
        ids: array[int] = array("i")
        texts = []
        kept: dict[str, _Piece] = {}
        for piece in pieces:
            if not piece:
                continue
            value = kept.get(piece) or known.get(piece) or held[piece]
            kept[piece] = value
            ids.extend(value[0])
            if value[1]:
                texts.append(value[1])
        if session_id is not None:
            self._hold(session_id, kept, sum(map(len, kept)))
        return ids, "[" + ",".join(texts) + "]"

    def forget(self, session_id: str) -> None:
        """Drop a session's held pieces (it finished)."""
        with self._lock:
            entry = self._sessions.pop(session_id, None)
            if entry is not None:
                self._chars -= entry[1]

    @property
    def held_sessions(self) -> int:
        return len(self._sessions)

    @property
    def held_chars(self) -> int:
        return self._chars

    def _hold(self, session_id: str, pieces: dict[str, _Piece], chars: int) -> None:
        with self._lock:
            old = self._sessions.pop(session_id, None)
            if old is not None:
                self._chars -= old[1]
            self._sessions[session_id] = (pieces, chars)
            self._chars += chars
            while self._sessions and (len(self._sessions) > self.max_sessions or self._chars > self.max_chars):
                _, (_, dropped) = self._sessions.popitem(last=False)
                self._chars -= dropped
