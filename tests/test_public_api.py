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
