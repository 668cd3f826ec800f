"""TRL 1.16.0's own reconciler, taken from its published wheel: the oracle of ``--policy trl``.

The wheel is downloaded at set-up, pinned with its hash (``tests/trl/requirements.txt``, the README's
test command), never installed and never committed.  ``async_rollout_worker.py`` imports accelerate,
datasets, transformers and the rest of TRL at module level, none of which ``_chain_to_sequences``
calls; so the module's source is read from the wheel, and only its standard-library imports and the
definitions the reconciler is made of (``TurnRecord``, ``TrainingSequence``, ``_common_prefix_len``,
``DriftKind``, ``_SampleBuilder``, ``_chain_to_sequences`` and the type aliases they name) are compiled
and run, unchanged, in a namespace of their own.  A test needing it skips, naming the set-up command,
when the wheel is absent, and fails instead where ``CI`` is set.
"""

from __future__ import annotations

import ast
import hashlib
import os
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from .helpers import REPO

WHEEL = REPO / "tests" / "trl" / "wheels" / "trl-1.16.0-py3-none-any.whl"
WHEEL_SHA256 = "c4726e139dd40e1a41661511c639c8a68416782b2e3e8c0befebd77bb7ba0396"
MODULE = "trl/experimental/async_grpo/async_rollout_worker.py"
SETUP = "pip download -q --no-deps --require-hashes -r tests/trl/requirements.txt -d tests/trl/wheels"

#: The definitions the reconciler is made of, by name (classes, functions, type aliases).
DEFINITIONS = frozenset(
    {
        "RolloutId",
        "TurnRecord",
        "TrainingSequence",
        "_common_prefix_len",
        "DriftKind",
        "_SampleBuilder",
        "_chain_to_sequences",
    }
)


@dataclass(frozen=True)
class Row:
    """One of TRL's training rows, as plain lists."""

    input_ids: list[int]
    completion_mask: list[int]
    old_log_probs: list[float]


def _stdlib(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and (node.module or "").split(".")[0] in sys.stdlib_module_names
    return all(alias.name.split(".")[0] in sys.stdlib_module_names for alias in node.names)


def _defined_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.ClassDef | ast.FunctionDef):
        return node.name
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    return None


def wheel_path() -> str:
    """The pinned wheel, its hash checked; skip (fail under ``CI``) when set-up has not fetched it."""
    if not WHEEL.is_file():
        message = f"{WHEEL.relative_to(REPO)} is not downloaded: run `{SETUP}` (the README's set-up)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    digest = hashlib.sha256(WHEEL.read_bytes()).hexdigest()
    assert digest == WHEEL_SHA256, f"{WHEEL} is not the pinned TRL 1.16.0 wheel (sha256 {digest})"
    return str(WHEEL)


_loaded: dict[str, Any] = {}


def reconciler() -> dict[str, Any]:
    """The namespace holding TRL's reconciler, compiled once from the wheel's own source."""
    if not _loaded:
        with zipfile.ZipFile(wheel_path()) as wheel:
            source = wheel.read(MODULE).decode("utf-8")
        tree = ast.parse(source, filename=MODULE)
        kept = [
            node
            for node in tree.body
            if (isinstance(node, ast.Import | ast.ImportFrom) and _stdlib(node)) or _defined_name(node) in DEFINITIONS
        ]
        found = {_defined_name(node) for node in kept} - {None}
        assert found == DEFINITIONS, f"{MODULE} no longer defines {sorted(DEFINITIONS - found)}"
        # A module of its own: the dataclasses look their module up in sys.modules while they are built.
        module = type(sys)("trl_async_rollout_worker")
        sys.modules["trl_async_rollout_worker"] = module
        namespace = module.__dict__
        exec(compile(ast.Module(body=kept, type_ignores=[]), f"{WHEEL.name}/{MODULE}", "exec"), namespace)
        _loaded.update(namespace)
    return _loaded


def chain_to_sequences(
    turns: Sequence[tuple[Sequence[int], Sequence[int], Sequence[float]]], fork_threshold: int
) -> tuple[list[Row], dict[str, float]]:
    """TRL's ``_chain_to_sequences`` on one conversation's ``(prompt_ids, output_ids, logprobs)`` in call order."""
    namespace = reconciler()
    turn_record: Callable[..., Any] = namespace["TurnRecord"]
    records = [turn_record(list(p), list(o), list(lp)) for p, o, lp in turns]
    sequences, tally = namespace["_chain_to_sequences"](records, "rollout", fork_threshold)
    rows = [Row(list(s.input_ids), list(s.completion_mask), list(s.old_log_probs)) for s in sequences]
    return rows, tally
