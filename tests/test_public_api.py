"""The package's public surface: complete, importable, and light."""

from __future__ import annotations

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
        "import sys; from tito_cli.rebuild import rebuild; "
        f"rebuild([{str(REPO / 'fixtures' / 'logs')!r}], {str(tmp_path / 's.parquet')!r}, workers=1); "
        "print('transformers' in sys.modules, 'pyarrow.compute' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "False False"
