"""The layout docs/architecture.md draws is the package's, and imports only point down the data flow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.support.helpers import REPO

PACKAGE = REPO / "tito_cli"

#: Layers, lowest first: a module may import from its own layer and the ones below it, never above.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "plugins", "turns", "schema", "tokenizer", "_arrow", "_parquet", "_atomic", "_memory", "_paths",
     "_targets"),
    ("families",),
    ("capture",),
    ("read",),
    ("algorithm",),
    ("simulate",),
    ("export",),
    ("run",),
    ("report",),
    ("render",),
    ("golden",),
    ("serve",),
    ("cli", "pytest_plugin", "__main__"),
]


def _layer(module: str) -> int:
    """The layer of a dotted module name relative to tito_cli (``""`` is the package itself)."""
    top = module.split(".")[0]
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise AssertionError(f"tito_cli.{module} belongs to no layer: add it to LAYERS and docs/architecture.md")


def _modules() -> dict[str, Path]:
    """Dotted names (relative to tito_cli) of every module, packages by their ``__init__``."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _documented_tree() -> set[str]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text[text.index("```text\ntito_cli/\n") :]
    block = block[: block.index("\n```", 1)]
    paths: set[str] = set()
    folders: list[str] = []
    for line in block.splitlines()[2:]:
        match = re.match(r"^( +)(\S+)", line)
        assert match, f"not a tree line: {line!r}"
        depth = len(match.group(1)) // 2 - 1
        name = match.group(2)
        del folders[depth:]
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            paths.add("/".join([*folders, name]))
    return paths


def test_the_documented_tree_lists_every_module_and_no_other() -> None:
    actual = {
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    }
    documented = _documented_tree()
    assert sorted(actual - documented) == [], "modules missing from docs/architecture.md"
    assert sorted(documented - actual) == [], "docs/architecture.md lists modules that do not exist"


def _imports(module: str, path: Path) -> list[tuple[str, int]]:
    """tito_cli modules (relative dotted names) that ``module`` imports, with line numbers."""
    is_package = path.name == "__init__.py"
    here = module.split(".") if module else []
    base = here if is_package else here[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
            elif node.module and (node.module == "tito_cli" or node.module.startswith("tito_cli.")):
                target = node.module.removeprefix("tito_cli").lstrip(".")
            else:
                continue
            if target:
                out.append((target, node.lineno))
            else:  # from tito_cli import x / from . import x: each name may be a module
                out.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("tito_cli."):
                    out.append((alias.name.removeprefix("tito_cli."), node.lineno))
    return out


def test_no_module_imports_from_a_layer_above_its_own() -> None:
    modules = _modules()
    upward = []
    for module, path in sorted(modules.items()):
        if not module:  # the package's lazy public names point everywhere on purpose
            continue
        own = _layer(module)
        for target, line in _imports(module, path):
            if target.split(".")[0] in {n for names in LAYERS for n in names} and _layer(target) > own:
                upward.append(f"{path.relative_to(REPO)}:{line} imports tito_cli.{target}")
    assert upward == []


def _module_graph() -> dict[str, set[str]]:
    """Module -> the tito_cli modules it imports (a ``from package import name`` naming a module: that module)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        if not module:  # the package's lazy public names point everywhere on purpose
            continue
        is_package = path.name == "__init__.py"
        here = module.split(".")
        base = here if is_package else here[:-1]
        edges: set[str] = set()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        type_only = _type_checking_imports(tree)
        for node in ast.walk(tree):
            if id(node) in type_only:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base[: len(base) - (node.level - 1)]
                    target = ".".join([*anchor, *(node.module.split(".") if node.module else [])])
                elif node.module and (node.module == "tito_cli" or node.module.startswith("tito_cli.")):
                    target = node.module.removeprefix("tito_cli").lstrip(".")
                else:
                    continue
                for alias in node.names:
                    named = f"{target}.{alias.name}" if target else alias.name
                    targets.append(named if named in modules else target)
            elif isinstance(node, ast.Import):
                targets = [a.name.removeprefix("tito_cli.") for a in node.names if a.name.startswith("tito_cli.")]
            edges.update(t for t in targets if t and t in modules and t != module)
        graph[module] = edges
    return graph


def _type_checking_imports(tree: ast.AST) -> set[int]:
    """The import nodes under ``if TYPE_CHECKING:``: annotations only, never run, so they make no import cycle."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                found.update(id(n) for n in ast.walk(statement) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return found


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in order:
            continue
        work = [(start, iter(sorted(graph[start])))]
        order[start] = low[start] = len(order)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in graph:
                    continue
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], order[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == order[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def test_no_cycle_between_modules_even_inside_one_package() -> None:
    # Layers rule out cycles between packages; this catches one inside a package (policy <-> router).
    assert _cycles(_module_graph()) == []


def test_imports_for_annotations_only_make_no_cycle_but_runtime_ones_do() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import A\nelse:\n    from .b import B\n"
    )
    skipped = _type_checking_imports(tree)
    names = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and id(n) in skipped}
    assert names == {"a"}


def test_the_cycle_check_finds_a_cycle_inside_a_package() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}, "b": {"b"}}
    assert _cycles(graph) == [["a.x", "a.y", "a.z"]]


#: A module does one job: past this many lines it holds several (docs/architecture.md).
MAX_MODULE_LINES = 500


def test_no_module_is_over_the_line_bound() -> None:
    long = {
        str(path.relative_to(REPO)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"split these modules by job (at most {MAX_MODULE_LINES} lines each)"


#: The gateway's modules are smaller still: one request's flow, one wire, one store each (issue #38).
MAX_SERVE_MODULE_LINES = 300


def test_no_gateway_module_is_over_its_line_bound() -> None:
    long = {
        str(path.relative_to(REPO)): lines
        for path in (PACKAGE / "serve").rglob("*.py")
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_SERVE_MODULE_LINES
    }
    assert long == {}, f"split these gateway modules by job (at most {MAX_SERVE_MODULE_LINES} lines each)"


# -- the test tree ---------------------------------------------------------------------------------

TESTS = REPO / "tests"


def _documented_test_folders() -> list[str]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    block = text[text.index("```text\ntests/\n") :]
    block = block[: block.index("\n```", 1)]
    return [line.split()[0].rstrip("/") for line in block.splitlines()[2:]]


def test_the_documented_test_tree_is_the_tests_folder() -> None:
    folders = sorted(p.name for p in TESTS.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert sorted(_documented_test_folders()) == folders
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["__init__.py", "conftest.py"], "test modules go in a folder"


def test_every_test_module_is_in_a_folder_and_imports_no_other_test_module() -> None:
    modules = sorted(TESTS.rglob("test_*.py"))
    assert len(modules) > 80
    imports: list[str] = []
    for path in modules:
        assert path.parent != TESTS and (path.parent / "__init__.py").is_file(), path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [alias.name for alias in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            if any(part.startswith("test_") for name in names for part in name.split(".")):
                imports.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert imports == [], "move what test modules share into tests/support/"


def test_the_tito_command_is_run_one_way_in_process() -> None:
    """Test modules run ``tito`` through ``tests/support/cli.py`` (the ``tito`` fixture), not a runner of their own."""
    runners = {"typer.testing", "click.testing"}
    own = sorted(
        str(path.relative_to(REPO))
        for path in TESTS.rglob("*.py")
        if path != TESTS / "support" / "cli.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module in runners and "CliRunner" in {a.name for a in node.names}
    )
    assert own == [], "run the command with tests.support.cli.tito"
