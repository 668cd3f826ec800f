"""The package's public surface: complete, importable, and light."""

from __future__ import annotations

import os
import subprocess
import sys

import tito_cli


def test_all_names_exist_and_nothing_public_is_missing() -> None:
    for name in tito_cli.__all__:
        assert hasattr(tito_cli, name), name
    module = type(tito_cli)
    exported = {n for n, v in vars(tito_cli).items() if not n.startswith("_") and not isinstance(v, module)}
    assert exported - {"annotations"} <= set(tito_cli.__all__)


def test_import_does_not_pull_in_transformers() -> None:
    code = "import sys, tito_cli, tito_cli.cli; print('transformers' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "False"


def test_a_rebuild_imports_neither_transformers_nor_pyarrow_compute(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Start-up is part of every command's time (docs/performance.md): keep these two out of it.
    from .helpers import REPO

    code = (
        "import sys; from tito_cli.rebuild_log import rebuild; "
        f"rebuild([{str(REPO / 'fixtures' / 'logs')!r}], {str(tmp_path / 's.parquet')!r}, workers=1); "
        "print('transformers' in sys.modules, 'pyarrow.compute' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "False False"


def _allocator_option_when_pyarrow_loads(statement: str, env: dict[str, str]) -> str:
    """Run ``statement`` in a fresh interpreter; what MIMALLOC_PURGE_DELAY was when pyarrow began to load."""
    code = (
        "import os, sys\n"
        "seen = []\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'pyarrow' and not seen:\n"
        "            seen.append(os.environ.get('MIMALLOC_PURGE_DELAY', 'unset'))\n"
        "sys.meta_path.insert(0, Watch())\n"
        f"{statement}\n"
        "print(seen[0] if seen else 'pyarrow not loaded')\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    return proc.stdout.strip()


def test_the_command_line_sets_the_allocator_option_before_pyarrow_loads() -> None:
    # mimalloc reads its options when pyarrow's library loads (tito_cli/cli/allocator.py).
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    assert _allocator_option_when_pyarrow_loads("import tito_cli.cli", env) == "-1"
    # A value the user set wins.
    assert _allocator_option_when_pyarrow_loads("import tito_cli.cli", {**env, "MIMALLOC_PURGE_DELAY": "250"}) == "250"


def test_the_library_leaves_the_allocator_alone() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MIMALLOC_PURGE_DELAY"}
    assert _allocator_option_when_pyarrow_loads("import tito_cli", env) == "pyarrow not loaded"
    assert _allocator_option_when_pyarrow_loads("from tito_cli import rebuild", env) == "unset"
