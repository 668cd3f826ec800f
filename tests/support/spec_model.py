"""SPEC §3–§4 written out literally, as a model to test the engine against.

The engine is optimised (indexed child lookup, segments that never copy
tokens).  This model is the opposite: plain lists, linear scans, every token
copied, each line a sentence of the spec.  Property tests feed both the same
random sessions and demand identical samples.  Keep it naive.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FlaggedSample", "ModelSample", "model_rebuild", "model_rebuild_slime03"]


def _key(message: Any) -> str:
    return json.dumps(message, sort_keys=True, ensure_ascii=False)


@dataclass(eq=False)
class _Node:
    role: str | None
    key: str | None  # None matches nothing
    children: list[_Node] = field(default_factory=list)
    turn: Any = None  # the turn of a generated node


@dataclass
class ModelSample:
    tokens: list[int]
    response_length: int
    loss_mask: list[int]
    rollout_log_probs: list[float]
    reward: float


def _mount_point(root: Any, messages: list[Any], same_message: Callable[[Any, Any], bool]) -> tuple[Any, int]:
    """§3 step 3: the mount point, and the index of the first prompt message with no matching child."""
    node, i = root, 0
    while i < len(messages):
        match = None
        for child in node.children:
            if child.role == messages[i]["role"] and same_message(child, messages[i]):
                match = child
                break
        if match is None:
            break
        node, i = match, i + 1
    return node, i


def _route(turns: list[Any], threshold: int) -> _Node:
    root = _Node(None, None)
    for turn in sorted(turns, key=lambda t: t.seq):
        messages = turn.prompt_messages
        # 1. An empty prompt is skipped.
        if not messages:
            continue
        # 3. Walk from the root, taking the first child with equal role and message (canonical JSON).
        node, i = _mount_point(root, messages, lambda child, m: child.key is not None and child.key == _key(m))
        # 4. Absorb a short assistant rewrite into the one candidate leaf.
        if threshold > 0 and i < len(messages) and messages[i]["role"] == "assistant":
            candidates = [
                c
                for c in node.children
                if c.role == "assistant"
                and c.turn is not None
                and not c.children
                and len(c.turn.output_ids) < threshold
            ]
            if len(candidates) == 1:
                absorbed = candidates[0]
                absorbed.turn = None
                absorbed.key = _key(messages[i])
                node, i = absorbed, i + 1
        # 5. Mount the rest routing-only.
        for message in messages[i:]:
            child = _Node(message["role"], _key(message))
            node.children.append(child)
            node = child
        # 6. Attach the turn as a new generated assistant leaf.
        response = turn.response_message
        node.children.append(_Node("assistant", None if response is None else _key(response), turn=turn))
    return root


# -- §4 steps that §8 keeps as written ("as in §4"): both models take them from here ----------


def _leaves_with_chains(root: Any) -> list[list[Any]]:
    """Every leaf's chain, from the root's child down to the leaf, leaves depth-first in insertion order."""
    chains: list[list[Any]] = []

    def visit(node: Any, path: list[Any]) -> None:
        if not node.children and path:
            chains.append(path)
        for child in node.children:
            visit(child, [*path, child])

    visit(root, [])
    return chains


def _fresh_segment() -> dict[str, Any]:
    return {"tokens": [], "mask": [], "logprobs": [], "spans": [], "first_prompt": 0, "turns": 0}


def _common_prefix(tokens: list[int], prompt: list[int]) -> int:
    """§4 step 1's ``lcp``."""
    lcp = 0
    while lcp < min(len(tokens), len(prompt)) and tokens[lcp] == prompt[lcp]:
        lcp += 1
    return lcp


def _claim(node: Any, claimed: list[Any]) -> bool:
    """§4 step 4: the turn is trained if its node is not yet claimed; claim it."""
    trained = not any(c is node for c in claimed)
    if trained:
        claimed.append(node)
    return trained


def _append_output(seg: dict[str, Any], turn: Any, trained: bool) -> None:
    """The end of §4 step 5: the output ids appended, their span recorded, the first prompt's length kept."""
    start = len(seg["tokens"])
    recorded = turn.output_logprobs
    for j, token in enumerate(int(x) for x in turn.output_ids):
        seg["tokens"].append(token)
        seg["mask"].append(1 if trained else 0)
        seg["logprobs"].append(float(recorded[j]) if trained and recorded is not None else 0.0)
    seg["spans"].append([start, len(seg["tokens"])])
    if seg["turns"] == 0:
        seg["first_prompt"] = len(turn.prompt_ids)
    seg["turns"] += 1


def model_rebuild(turns: list[Any], threshold: int, reward: float, reward_mode: str) -> list[ModelSample]:
    """The samples SPEC §4 says a session's turns give, in emission order."""
    root = _route(turns, threshold)
    claimed: list[_Node] = []
    out: list[tuple[list[int], int, list[int], list[float]]] = []

    def close(seg: dict[str, Any]) -> None:
        tokens, mask, logprobs, first = seg["tokens"], seg["mask"], seg["logprobs"], seg["first_prompt"]
        if not tokens or 1 not in mask[first:]:
            return
        out.append((list(tokens), len(tokens) - first, mask[first:], logprobs[first:]))

    for chain in _leaves_with_chains(root):
        seg = _fresh_segment()
        for node in chain:
            if node.turn is None:
                continue
            turn = node.turn
            prompt = [int(x) for x in turn.prompt_ids]
            lcp = _common_prefix(seg["tokens"], prompt)
            drift = len(seg["tokens"]) - lcp
            if drift == 0:
                can = True
            elif not seg["spans"] or lcp < seg["spans"][-1][0]:
                can = False
            else:
                can = threshold > 0 and drift < threshold
            if not can:
                close(seg)
                seg = _fresh_segment()
                lcp = 0
            trained = _claim(node, claimed)
            # Realign: cut back to lcp; a cut inside the last span shortens it.
            del seg["tokens"][lcp:], seg["mask"][lcp:], seg["logprobs"][lcp:]
            if seg["spans"] and seg["spans"][-1][1] > lcp:
                seg["spans"][-1][1] = lcp
            for token in prompt[lcp:]:
                seg["tokens"].append(token)
                seg["mask"].append(0)
                seg["logprobs"].append(0.0)
            _append_output(seg, turn, trained)
        close(seg)

    share = reward / len(out) if reward_mode == "split" and out else reward
    return [ModelSample(t, n, m, lp, share) for t, n, m, lp in out]


# -- SPEC §8: the slime-0.3 policy, written out just as literally ------------------------


def _same_value(a: Any, b: Any) -> bool:
    """§8.1: parsed JSON values equal as Python compares them, a NaN equal to a NaN."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_value(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return False
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    return bool(a == b)


@dataclass(eq=False)
class _ValueNode:
    role: str | None
    message: Any  # None matches nothing (the root, a generated node without a response message)
    children: list[_ValueNode] = field(default_factory=list)
    turn: Any = None


@dataclass
class FlaggedSample(ModelSample):
    flags: dict[str, bool] = field(default_factory=dict)


def _route_slime03(turns: list[Any], threshold: int) -> _ValueNode:
    root = _ValueNode(None, None)
    for turn in sorted(turns, key=lambda t: t.seq):
        messages = turn.prompt_messages
        if not messages:
            continue
        # §3 step 3, messages equal by value (§8.1).
        node, i = _mount_point(
            root, messages, lambda child, m: child.message is not None and _same_value(child.message, m)
        )
        # §8.2: all assistant children count; only a sole, generated, childless, short one absorbs.
        if threshold > 0 and i < len(messages) and messages[i]["role"] == "assistant":
            assistants = [c for c in node.children if c.role == "assistant"]
            if len(assistants) == 1:
                only = assistants[0]
                if only.turn is not None and not only.children and len(only.turn.output_ids) < threshold:
                    only.turn = None
                    only.message = messages[i]
                    node, i = only, i + 1
        for message in messages[i:]:
            child = _ValueNode(message["role"], message)
            node.children.append(child)
            node = child
        node.children.append(_ValueNode("assistant", turn.response_message, turn=turn))
    return root


def model_rebuild_slime03(
    turns: list[Any],
    threshold: int,
    reward: float,
    reward_mode: str | None = None,
    max_sample_tokens: int | None = None,
) -> tuple[list[FlaggedSample], int]:
    """The samples SPEC §8 says a session's turns give, in emission order, and how many were left out."""
    root = _route_slime03(turns, threshold)
    claimed: list[_ValueNode] = []
    out: list[tuple[list[int], int, list[int], list[float], dict[str, bool]]] = []
    left_out = 0

    def close(seg: dict[str, Any], flags: dict[str, bool]) -> None:
        nonlocal left_out
        tokens, mask, logprobs, first = seg["tokens"], seg["mask"], seg["logprobs"], seg["first_prompt"]
        if not tokens or 1 not in mask[first:]:
            return
        mask, logprobs = mask[first:], logprobs[first:]
        if max_sample_tokens is not None:
            # §8.7: the cut comes after the keep rule; a first prompt longer than the cap is left out.
            if first > max_sample_tokens:
                left_out += 1
                return
            tokens = tokens[:max_sample_tokens]
            mask = mask[: len(tokens) - first]
            logprobs = logprobs[: len(tokens) - first]
        out.append((list(tokens), len(tokens) - first, list(mask), list(logprobs), flags))

    for chain in _leaves_with_chains(root):
        generated = [n.turn for n in chain if n.turn is not None]
        # §8.6, over the leaf's chain: every sample of the leaf carries the same flags.
        flags = {
            "truncated": bool(generated) and generated[-1].finish_reason == "length",
            "use_tool": any(
                isinstance(t.response_message, dict) and bool(t.response_message.get("tool_calls")) for t in generated
            ),
            "ill_formed": any(t.ill_formed for t in generated),
        }
        seg = _fresh_segment()
        for node in chain:
            if node.turn is None:
                continue
            turn = node.turn
            prompt = [int(x) for x in turn.prompt_ids]
            output = [int(x) for x in turn.output_ids]
            lcp = _common_prefix(seg["tokens"], prompt)
            drift = len(seg["tokens"]) - lcp
            # §8.3: the incoming output's length gates a realign.
            if drift == 0:
                can = True
            else:
                can = bool(seg["spans"]) and lcp >= seg["spans"][-1][0] and len(output) < threshold
            if not can:
                close(seg, flags)
                seg = _fresh_segment()
            trained = _claim(node, claimed)
            if seg["tokens"] and drift:
                # §8.4: everything from the latest response's start is the prompt's, loss 0.
                s = seg["spans"][-1][0]
                seg["tokens"] = seg["tokens"][:s] + prompt[s:]
                seg["mask"] = seg["mask"][:s] + [0] * (len(prompt) - s)
                seg["logprobs"] = seg["logprobs"][:s] + [0.0] * (len(prompt) - s)
            else:
                held = len(seg["tokens"])
                seg["tokens"] += prompt[held:]
                seg["mask"] += [0] * (len(prompt) - held)
                seg["logprobs"] += [0.0] * (len(prompt) - held)
            # Then the output is appended as in §4 and recorded as the new last span.
            _append_output(seg, turn, trained)
        close(seg, flags)

    # §8.5: the whole reward by default.
    share = reward / len(out) if reward_mode == "split" and out else reward
    return [FlaggedSample(t, n, m, lp, share, flags) for t, n, m, lp, flags in out], left_out
