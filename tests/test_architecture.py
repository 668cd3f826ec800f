"""The layout docs/architecture.md draws is the package's, and imports only point down the data flow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from .helpers import REPO

PACKAGE = REPO / "tito_cli"

#: Layers, lowest first: a module may import from its own layer and the ones below it, never above.
LAYERS: list[tuple[str, ...]] = [
    ("errors", "plugins", "turns", "schema", "tokenizer", "_arrow", "_atomic", "_paths", "_targets"),
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
