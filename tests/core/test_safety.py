"""Logs are untrusted input: no code execution from them, no paths out of them.

* The library source never unpickles, ``eval``s or ``exec``s anything, never
  asks transformers to run remote code, and renders Jinja only in a sandbox
  (chat templates go through transformers, whose environment is sandboxed).
* File names made from session ids stay inside their folder and never collide.
"""

from __future__ import annotations

import ast
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support.helpers import REPO
from tito_cli._paths import safe_filename

SOURCES = sorted((REPO / "tito_cli").rglob("*.py"))
UNSAFE_MODULES = {"pickle", "cPickle", "dill", "cloudpickle", "marshal", "shelve", "joblib"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__"}


def _trees() -> list[tuple[Path, ast.AST]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"), str(path))) for path in SOURCES]


def test_sources_are_found() -> None:
    assert len(SOURCES) > 10


def test_no_deserialisation_or_evaluation_of_input() -> None:
    problems = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                names = []
            problems += [f"{path}:{node.lineno} imports {n}" for n in names if n in UNSAFE_MODULES]
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name in UNSAFE_CALLS and isinstance(func, ast.Name):  # the builtins, not re.compile
                    problems.append(f"{path}:{node.lineno} calls {name}")
                if name in {"load", "loads"} and isinstance(func, ast.Attribute):
                    owner = func.value
                    if isinstance(owner, ast.Name) and owner.id in {"yaml", "np", "numpy", "torch"}:
                        problems.append(f"{path}:{node.lineno} calls {owner.id}.{name} (may unpickle)")
                for kw in node.keywords:
                    if kw.arg in {"trust_remote_code", "allow_pickle"} and not (
                        isinstance(kw.value, ast.Constant) and kw.value.value is False
                    ):
                        problems.append(f"{path}:{node.lineno} passes {kw.arg}")
    assert problems == []


def test_jinja_only_sandboxed() -> None:
    problems = []
    for path, tree in _trees():
        for node in ast.walk(tree):
            module = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            if module.startswith("jinja2") and module != "jinja2.sandbox":
                problems.append(f"{path}:{node.lineno} from {module} import …")
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "jinja2"
                and node.attr in {"Environment", "Template"}
            ):
                problems.append(f"{path}:{node.lineno} jinja2.{node.attr} (not sandboxed)")
    assert problems == []


HOSTILE_IDS = ["../../etc/passwd", "..", ".", "", "/abs/path", "a/b\\c", "nul\x00byte", ".hidden", "x" * 1000, "日本"]


def test_hostile_session_ids_become_plain_names(tmp_path: Path) -> None:
    names = {safe_filename(sid, ".txt") for sid in HOSTILE_IDS}
    assert len(names) == len(HOSTILE_IDS)
    for name in names:
        path = tmp_path / name
        path.write_text("x")  # a real file system accepts it...
        assert path.resolve().parent == tmp_path.resolve()  # ...inside the folder
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


@given(st.text(max_size=300), st.text(max_size=300))
def test_safe_filename_is_contained_and_injective(a: str, b: str) -> None:
    for sid in (a, b):
        name = safe_filename(sid, ".golden")
        assert "/" not in name and "\\" not in name and "\x00" not in name
        assert not name.startswith(".") and name not in ("", ".golden")
        assert len(name.encode("utf-8")) <= 200
        assert name.isascii()
    if a != b:
        assert safe_filename(a) != safe_filename(b)
