"""The package's public surface: complete, importable, and light."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import tito_cli
from tito_cli.cli.native_env import NATIVE_OPTIONS


def test_all_names_exist_and_nothing_public_is_missing() -> None:
    for name in tito_cli.__all__:
        assert hasattr(tito_cli, name), name
    module = type(tito_cli)
    exported = {n for n, v in vars(tito_cli).items() if not n.startswith("_") and not isinstance(v, module)}
    assert exported - {"annotations"} <= set(tito_cli.__all__)


def test_public_names_are_listed_before_first_use() -> None:
    # They are imported on first use (tito_cli/__init__.py); dir() (completion, help()) lists them anyway.
    code = "import tito_cli; print(sorted(set(tito_cli.__all__) - set(dir(tito_cli))))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "[]"


def test_import_does_not_pull_in_transformers() -> None:
    code = "import sys, tito_cli, tito_cli.cli; print('transformers' in sys.modules)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "False"


def test_a_rebuild_imports_no_slow_module_it_does_not_need(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Start-up is part of every command's time (docs/performance.md): transformers, pyarrow.compute
    # (~50 ms) and numpy.ma (~30 ms, pulled in by np.unique) stay out of it.
    from tests.support.helpers import REPO

    slow = ["transformers", "pyarrow.compute", "numpy.ma"]
    code = (
        "import sys; from tito_cli.run.rebuild import rebuild; "
        f"rebuild([{str(REPO / 'fixtures' / 'logs')!r}], {str(tmp_path / 's.parquet')!r}, workers=1); "
        f"print([m for m in {slow!r} if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip() == "[]"


def _modules_after_command(args: list[str], modules: list[str]) -> list[str]:
    """``tito ARGS`` through the console script's ``main``, in a fresh interpreter: which of ``modules`` it loaded."""
    code = (
        "import sys\n"
        f"sys.argv = ['tito', *{args!r}]\n"
        "from tito_cli.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
        f"print([m for m in {modules!r} if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    return list(json.loads(proc.stdout.strip().splitlines()[-1].replace("'", '"')))


def test_a_command_imports_its_own_module_not_every_commands(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Start-up is part of every command's time (docs/performance.md, "Where the time goes").
    from tests.support.helpers import REPO

    others = ["tito_cli.cli.serve", "tito_cli.cli.view", "tito_cli.cli.simulate", "tito_cli.cli.inspect"]
    # A command that reads no Parquet loads neither pyarrow nor numpy.
    assert _modules_after_command(["serve", "--help"], ["pyarrow", "numpy", *others[1:]]) == []
    # A rebuild loads what it reads with, and no other command, nor --drift-classes' tokenizer search.
    rebuild = ["rebuild", str(REPO / "fixtures" / "logs"), "--out", str(tmp_path / "s.parquet"), "--workers", "1"]
    loaded = _modules_after_command(rebuild, ["pyarrow", *others, "tito_cli.report.drift", "tito_cli.tokenizer"])
    assert loaded == ["pyarrow"]
    # Without a command, every command is there to be listed.
    assert _modules_after_command(["--help"], others) == others


def _options_when_libraries_load(statement: str, env: dict[str, str]) -> dict[str, str]:
    """Run ``statement`` in a fresh interpreter; the native options in the environment as each library began to load."""
    code = (
        "import json, os, sys\n"
        "seen = {}\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        for library, option in (('pyarrow', 'MIMALLOC_PURGE_DELAY'), ('numpy', 'OPENBLAS_NUM_THREADS')):\n"
        "            if name == library and library not in seen:\n"
        "                seen[library] = os.environ.get(option, 'unset')\n"
        "sys.meta_path.insert(0, Watch())\n"
        f"{statement}\n"
        "print(json.dumps(seen))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True, env=env
    )
    loaded: dict[str, str] = json.loads(proc.stdout)
    return loaded


_CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in NATIVE_OPTIONS}


def test_the_command_line_sets_native_options_before_the_libraries_load() -> None:
    # Each library reads its option once, when it loads (tito_cli/cli/native_env.py).
    # (The app with every command: ``import tito_cli.cli`` alone loads neither library.)
    expected = {"pyarrow": NATIVE_OPTIONS["MIMALLOC_PURGE_DELAY"], "numpy": "1"}
    assert _options_when_libraries_load("from tito_cli.cli import app", _CLEAN_ENV) == expected
    # A value the user set wins.
    user = {**_CLEAN_ENV, "MIMALLOC_PURGE_DELAY": "250", "OPENBLAS_NUM_THREADS": "2"}
    assert _options_when_libraries_load("from tito_cli.cli import app", user) == {"pyarrow": "250", "numpy": "2"}


def test_the_library_leaves_native_options_alone() -> None:
    assert _options_when_libraries_load("import tito_cli", _CLEAN_ENV) == {}
    loaded = _options_when_libraries_load("from tito_cli import rebuild", _CLEAN_ENV)
    assert loaded == {"pyarrow": "unset", "numpy": "unset"}


def test_every_command_is_in_the_table_main_imports_it_from() -> None:
    # tito COMMAND imports only COMMANDS[COMMAND]'s module (tito_cli/cli/__init__.py main).
    import typer.main

    from tito_cli.cli import COMMANDS, app

    group = typer.main.get_command(app)
    assert sorted(group.commands) == sorted(COMMANDS)  # type: ignore[attr-defined]
