"""The golden dump of one session: deterministic, diff-friendly text.

A dump is what CI compares, so it holds everything that decides the training
samples and nothing that varies between runs (no times, no absolute paths, no
dict-order or hash-seed effects).  Layout of the ``full`` style::

    tito golden dump (format 2)              header: session, policy, tokenizer
    == turns ==                              one line per turn, in seq order
    == tree ==                               the routing tree, indented at branch points
    == packing ==                            one line per linearization decision
    == drift ==                              per fork and realign: where, its class, and
                                             both sides around the first differing token
    == samples ==                            per sample: a header, a digest, then
                                             one line per span of tokens

A *span line* holds a run of tokens of one origin -- the first prompt, the
prompt tail of turn ``seq k``, or the output of turn ``seq k`` -- with its
loss flag (``TRAIN`` for loss 1, ``ctx`` for an output that is context
only).  Decoded tokens are separated by single spaces; whitespace inside a
token is made visible (``␣`` ``↵`` ``⇥``), other invisible characters are
escaped (``\\u00a0``) and an empty token is written ``∅``, so the separator
is never ambiguous.  A decoded span is continued on a new line (repeating its
label) after each token that ends in a newline, so prompts read like text and
a drift in one turn changes a few lines, not the whole file.  Without a
tokenizer the tokens are their ids, one line per span.

The ``compact`` style writes one line per sample in bracket notation
(``1000 1025 [9101] [9009]``: loss-1 tokens in brackets), for small
synthetic cases where the whole sample fits on a line.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Literal

import numpy as np

from .._paths import safe_filename
from ..algorithm.linearize import LinearizedSample
from ..algorithm.policy import Policy
from ..algorithm.session import SessionResult
from ..algorithm.tree import Node
from ..errors import TokenizerError
from ..report.describe import message_preview
from ..report.drift import divergences
from ..report.session_facts import Region, rewrites, sample_regions
from ..tokenizer import TokenizerChoice, TokenText, as_choice, beyond_vocabulary, visible
from ..turns import Reject, canonical_json

__all__ = [
    "DUMP_FORMAT",
    "DUMP_HEADER",
    "DumpStyle",
    "dump_file_name",
    "dump_session",
    "escape_invisible",
    "golden_token_text",
    "token_label",
    "tokenizer_identity",
]

#: Bumped when the layout changes, so old goldens fail on their first line, not mid-file.
#: 2: the drift section (each fork and realign, decoded, classified).
DUMP_FORMAT = 2
#: How every dump begins (any format): ``tito check --update`` removes only files that begin so.
DUMP_HEADER = "tito golden dump ("

DumpStyle = Literal["full", "compact"]

#: Width of the label column of span lines; fixed so one new long label does not re-align a sample.
_LABEL_WIDTH = 20
_PREVIEW_WIDTH = 60


def dump_file_name(session_id: str) -> str:
    """``<session_id>.txt``, made safe (no path separators, no hidden files, no collisions)."""
    return safe_filename(session_id, ".txt")


# -- tokens -------------------------------------------------------------------


def escape_invisible(text: str) -> str:
    """Escape every invisible character but the plain space (``\\u00a0``, ``\\u200b``, ``\\u000a``)."""
    out = []
    for ch in text:
        category = unicodedata.category(ch)
        # Separators, controls and format characters (zero-width, bidi marks) would hide in a diff.
        if ch != " " and (category[0] in "CZ"):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)


def token_label(tokens: TokenText, token_id: int) -> str:
    """One token as a single space-free word: decoded with whitespace visible, or its id."""
    if not tokens.decodes:
        return str(int(token_id))
    if tokens.beyond(token_id):
        return beyond_vocabulary(int(token_id)).replace(" ", "_")  # a dump word has no spaces
    raw = tokens.raw(token_id)
    if not raw:
        return "∅"
    # visible() first (space, newline, tab get their symbols), then escape what is left.
    return escape_invisible(visible(raw))


class TokenWords:
    """Token ids as dump words, cached per id: a dump writes each distinct id thousands of times."""

    def __init__(self, tokens: TokenText) -> None:
        self.tokens = tokens
        self._cache: dict[int, str] = {}
        #: Ids whose word ends in a newline: a decoded span line breaks after them.
        self._newline: set[int] = set()

    @property
    def decodes(self) -> bool:
        return self.tokens.decodes

    def words(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        id_list = np.asarray(ids).tolist()
        cache = self._cache
        for token in set(id_list).difference(cache):
            word = cache[token] = token_label(self.tokens, token)
            if word.endswith("↵"):
                self._newline.add(token)
        return list(map(cache.__getitem__, id_list))

    def lines(self, ids: Sequence[int] | np.ndarray) -> list[str]:
        """Space-separated words; decoded text is broken after each token ending in a newline."""
        words = self.words(ids)
        if not self.decodes or not self._newline:
            return [" ".join(words)]
        ends = np.flatnonzero(np.isin(np.asarray(ids), np.fromiter(self._newline, dtype=np.int64))) + 1
        cuts = [0, *ends.tolist()]
        if cuts[-1] != len(words):
            cuts.append(len(words))
        return [" ".join(words[lo:hi]) for lo, hi in pairwise(cuts)] or [""]


def tokenizer_identity(tokens: TokenText) -> str:
    """How the header names the tokenizer: stable across machines (no absolute paths)."""
    if not tokens.decodes:
        return "none (token ids)"
    name = tokens.name or "?"
    if Path(name).is_absolute():
        name = Path(name).name
    size = len(tokens.tokenizer)
    return f"{name} (vocabulary {size})"


def golden_token_text(
    recorded: str | None,
    log_dirs: Iterable[Path] = (),
    *,
    override: TokenizerChoice | str | os.PathLike[str] | None = None,
    decode: bool = True,
) -> TokenText:
    """The decoder for dumps: strict, because a dump must not depend on what a machine has.

    ``inspect`` may fall back to ids when the log's tokenizer is missing; a
    golden dump may not, or the same log would dump differently on a machine
    without the tokenizer and every check there would fail with a useless diff.
    The header names the tokenizer the log records, wherever it was found.
    """
    if not decode:
        return TokenText(None, None)
    try:
        return TokenText.open(recorded, log_dirs, as_choice(override))
    except TokenizerError as exc:
        exc.tip = f"{exc.tip}; or pass --no-decode to dump token ids" if exc.tip else "pass --no-decode"
        raise


# -- dump ---------------------------------------------------------------------


def dump_session(
    result: SessionResult | Reject,
    policy: Policy,
    tokens: TokenText | TokenWords,
    style: DumpStyle = "full",
    *,
    known_files: Sequence[str] = (),
) -> str:
    """The dump text of one session (``\\n`` line ends, ends with a newline).

    ``known_files`` are log file paths that a reject reason may mention; they
    are shortened to their names so the dump does not depend on where the log
    lives.  Pass a :class:`TokenWords` to share its cache across sessions.
    """
    words = tokens if isinstance(tokens, TokenWords) else TokenWords(tokens)
    lines = [
        f"{DUMP_HEADER}format {DUMP_FORMAT}, style {style})",
        f"session: {_one_line(result.session_id)}",
        f"policy: {policy.label()}",
        f"tokenizer: {tokenizer_identity(words.tokens)}",
    ]
    if isinstance(result, Reject):
        lines.append(f"rejected: {_portable(result.reason, known_files)}")
        return _finish(lines)
    lines.extend(_outcome(result))
    if style == "compact":
        lines.extend(_compact_samples(result, words))
    else:
        lines.extend(_turns(result))
        lines.extend(_tree(result))
        lines.extend(_packing(result))
        lines.extend(_drift(result, words.tokens))
        lines.extend(_samples(result, words))
    return _finish(lines)


def _finish(lines: list[str]) -> str:
    # No trailing whitespace anywhere: it is invisible in a diff and editors strip it.
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _one_line(text: str) -> str:
    """Free text (ids, reasons, labels) on one line: newlines and other invisibles escaped."""
    return escape_invisible(text)


def _portable(reason: str, known_files: Sequence[str]) -> str:
    for path in sorted(known_files, key=len, reverse=True):
        reason = reason.replace(path, Path(path).name)
    return _one_line(reason)


def _number(value: float | int | None) -> str:
    # repr() of a float is the shortest round-trip form: identical on every platform.
    return "-" if value is None else repr(value)


def _outcome(result: SessionResult) -> list[str]:
    info = result.info
    if not info.finished:
        lines = ["outcome: no sessions row (reward 0.0)"]
    else:
        lines = [
            f"outcome: reward {_number(info.reward)}, index {_number(info.index)}, "
            f"group index {_number(info.group_index)}, label {_one_line(info.label) if info.label else '-'}"
            + (f", rollout id {_number(info.rollout_id)}" if info.rollout_id is not None else "")
        ]
    if info.metadata:
        lines.append(f"session metadata: {_one_line(canonical_json(info.metadata))}")
    return lines


def _turns(result: SessionResult) -> list[str]:
    tree = result.tree
    index = {id(t): i for i, t in enumerate(tree.turns, start=1)}
    absorbed = rewrites(result)
    rows: list[tuple[int, str]] = []
    for turn in tree.turns:
        logprobs = "logprobs" if turn.output_logprobs is not None else "no logprobs"
        line = (
            f"seq {turn.seq}: turn {index[id(turn)]}, prompt {turn.prompt_length} tokens "
            f"/ {len(turn.prompt_messages)} messages, output {len(turn.output_ids)} tokens, "
            f"{logprobs}, finish {_one_line(turn.finish_reason)} → "
            f"{escape_invisible(message_preview(turn.response_message, _PREVIEW_WIDTH))}"
        )
        if turn.ill_formed:
            line += " (ill-formed)"
        if turn.seq in absorbed:
            line += " (absorbed: rewritten by a later prompt)"
        rows.append((turn.seq, line))
    rows.extend((seq, f"seq {seq}: skipped (empty prompt)") for seq in tree.skipped)
    rows.sort()
    header = f"== turns ({len(tree.turns) + len(tree.skipped)}) =="
    lines = ["", header, *(line for _, line in rows)]
    if tree.ambiguous_rewrites:
        seqs = " ".join(str(s) for s in tree.ambiguous_rewrites)
        lines.append(f"ambiguous rewrites (nothing absorbed): seq {seqs}")
    return lines


def _node_label(node: Node, index: dict[int, int]) -> str:
    preview = escape_invisible(message_preview(node.message, _PREVIEW_WIDTH))
    role = _one_line(node.role) if node.role is not None else "?"
    if node.turn is not None:
        return f"{role} [turn {index[id(node.turn)]}, seq {node.turn.seq}] {preview}"
    if node.merged_rewrite is not None:
        merged = node.merged_rewrite
        return (
            f"{role} [rewrite of seq {merged.abandoned_seq}, {merged.abandoned_response_tokens} "
            f"tokens abandoned] {preview}"
        )
    tools = " [tools]" if node.tools is not None else ""
    return f"{role}{tools} {preview}"


def _tree(result: SessionResult) -> list[str]:
    """Indent only where the tree branches: a 200-turn chain stays at the left margin."""
    tree = result.tree
    index = {id(t): i for i, t in enumerate(tree.turns, start=1)}
    lines = ["", f"== tree (leaves: {len(tree.leaves())}) =="]
    # (node, depth, first of a branch)
    stack: list[tuple[Node, int, bool]] = []
    root_children = tree.root.children
    branching = len(root_children) > 1
    for child in reversed(root_children):
        stack.append((child, 1 if branching else 0, branching))
    while stack:
        node, depth, opens_branch = stack.pop()
        marker = "- " if opens_branch else "  " if depth else ""
        lines.append("  " * max(depth - 1, 0) + marker + _node_label(node, index))
        children = node.children
        if len(children) > 1:
            for child in reversed(children):
                stack.append((child, depth + 1, True))
        elif children:
            stack.append((children[0], depth, False))
    return lines


def _packing(result: SessionResult) -> list[str]:
    lines = ["", "== packing =="]
    for d in result.linearization.decisions:
        kind = d.kind if d.cause is None else f"fork ({d.cause.value})"
        trained = "trained" if d.trained else "context (trained earlier)"
        lines.append(f"leaf {d.leaf}, seq {d.seq}: {kind}, lcp {d.lcp}, drift {d.drift}, {trained}")
    return lines


def _drift(result: SessionResult, tokens: TokenText) -> list[str]:
    """Each fork and realign: where, its class, and both sides around the first differing token."""
    items = divergences(result, tokens)
    lines = ["", f"== drift ({len(items)}) =="]
    for d in items:
        kind = d.kind if d.cause is None else f"fork ({d.cause})"
        lines.append(f"leaf {d.leaf}, seq {d.seq}: {kind} at {d.index}, drift {d.drift}, {d.drift_class}")
        common = d.index - d.window_start
        if d.shared_text is not None and d.held_text is not None and d.prompt_text is not None:
            shared, held, prompt = (escape_invisible(t) for t in (d.shared_text, d.held_text, d.prompt_text))
        else:
            shared = " ".join(map(str, d.held_ids[:common]))
            held = " ".join(map(str, d.held_ids[common:]))
            prompt = " ".join(map(str, d.prompt_ids[common:]))
        lines.append(f"  held:   {shared} ▸ {held}")
        lines.append(f"  prompt: {shared} ▸ {prompt}")
    return lines


def sample_digest(sample: LinearizedSample, reward: float) -> str:
    """A short hash of everything a trainer reads from the sample (logprobs included).

    Span lines show tokens and loss flags; the digest makes sure a change they
    cannot show (a logprob, an id that decodes like another) still fails.
    """
    h = hashlib.sha256()
    h.update(np.asarray(sample.tokens, dtype="<i4").tobytes())
    h.update(b"|" + str(sample.response_length).encode())
    h.update(b"|" + np.asarray(sample.loss_mask, dtype="i1").tobytes())
    h.update(b"|" + np.asarray(sample.rollout_log_probs, dtype="<f4").tobytes())
    h.update(b"|" + repr(float(reward)).encode())
    return h.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class _Run:
    """Tokens ``[start, end)`` of one origin and one loss flag."""

    start: int
    end: int
    label: str
    flag: str


def _region_label(region: Region) -> str:
    """How a region is labelled in a dump (the label column of span lines)."""
    if region.kind == "first_prompt":
        return "prompt"
    if region.kind == "prompt":
        return f"tail seq {region.seq}"
    return f"out seq {region.seq}"


def span_runs(sample: LinearizedSample) -> list[_Run]:
    """Split a sample's tokens by origin (its regions: first prompt, prompt tail, output) and loss value."""
    offset = sample.first_prompt_length
    # Loss flags come from the mask itself (the prompt region has none), so a run
    # whose mask were mixed would be split rather than mislabelled.
    loss = np.concatenate((np.zeros(offset, dtype=np.int8), np.asarray(sample.loss_mask, dtype=np.int8)))
    runs: list[_Run] = []
    for region in sample_regions(sample):
        start, end, label, is_output = region.start, region.end, _region_label(region), region.kind == "output"
        if start == end:
            if is_output:  # an empty output still shows that the turn was packed here
                runs.append(_Run(start, end, label, "TRAIN" if region.trained else "ctx"))
            continue
        cuts = [start, *(start + 1 + np.flatnonzero(np.diff(loss[start:end]))).tolist(), end]
        for lo, hi in pairwise(cuts):
            flag = "TRAIN" if loss[lo] else ("ctx" if is_output else "")
            runs.append(_Run(lo, hi, label, flag))
    return runs


def _samples(result: SessionResult, tokens: TokenWords) -> list[str]:
    lin = result.linearization
    left_out = f"; left out (first prompt > max sample tokens): {len(lin.left_out)}" if lin.left_out else ""
    lines = ["", f"== samples ({len(lin.samples)}; segments dropped: {lin.dropped_segments}{left_out}) =="]
    for number, (sample, reward) in enumerate(zip(lin.samples, result.rewards, strict=True)):
        prompt = sample.first_prompt_length
        lines.append("")
        lines.append(
            f"sample {number}: leaf {sample.leaf}, segment {sample.segment}, {len(sample.tokens)} tokens "
            f"(prompt {prompt}, response {sample.response_length}), {int(sample.loss_mask.sum())} trained, "
            f"reward {_number(reward)}"
        )
        seqs = " ".join(str(s) for s in sample.seqs)
        trained = " ".join(str(s) for s in sample.trained_seqs) or "-"
        fork = sample.fork.value if sample.fork is not None else "-"
        lines.append(f"  turns seq {seqs}; trained seq {trained}; starts at fork: {fork}")
        if sample.flags is not None:
            lines.append("  flags: " + ", ".join(f"{k} {str(v).lower()}" for k, v in sample.flags.items()))
        lines.append(f"  digest {sample_digest(sample, reward)}")
        ids = sample.tokens
        for run in span_runs(sample):
            head = f"  {run.label:<{_LABEL_WIDTH}} {run.flag:<5} |"
            for text in tokens.lines(ids[run.start : run.end]):
                lines.append(f"{head} {text}" if text else head)
    return lines


def _compact_samples(result: SessionResult, tokens: TokenWords) -> list[str]:
    left_out = result.linearization.left_out
    lines = [f"samples: {len(result.samples)}" + (f", left out: {len(left_out)}" if left_out else "")]
    for number, (sample, reward) in enumerate(zip(result.samples, result.rewards, strict=True)):
        offset = sample.first_prompt_length
        words = tokens.words(sample.tokens)
        for position in np.flatnonzero(sample.loss_mask).tolist():
            words[offset + position] = f"[{words[offset + position]}]"
        flags = ""
        if sample.flags is not None:
            flags = ", flags " + (",".join(k for k, v in sample.flags.items() if v) or "-")
        lines.append(
            f"sample {number} (response {sample.response_length}, reward {_number(reward)}{flags}): {' '.join(words)}"
        )
    return lines
