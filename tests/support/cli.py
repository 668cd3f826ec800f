"""The ``tito`` command in the tests: one way to run it in this process, one way to run it as a process.

* :func:`tito` runs the command in this process through typer's ``CliRunner`` (arguments turned into
  strings; ``env`` sets variables for the run; ``expect`` asserts the exit status). The result has
  ``exit_code``, ``stdout`` and ``stderr``. The ``tito`` fixture (``tests/conftest.py``) hands it out.
* :func:`tito_process` runs ``python -m tito_cli`` (this checkout's code) as a real process, bounded by
  ``timeout``, for what needs one: signals, a fresh interpreter, a working directory of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from click.testing import Result
from typer.testing import CliRunner

from tests.support.helpers import REPO
from tito_cli.cli import app

__all__ = ["tito", "tito_process"]


def tito(*args: object, env: Mapping[str, str | None] | None = None, expect: int | None = None) -> Result:
    """``tito ARGS`` in this process; the result's ``exit_code``, ``stdout`` and ``stderr`` are what it did.

    With ``expect``, the exit status must be that (the assertion shows what the command printed).
    """
    result = CliRunner().invoke(app, [str(a) for a in args], env=env)
    if expect is not None:
        assert result.exit_code == expect, f"tito {' '.join(map(str, args))}: exit {result.exit_code}\n{result.output}"
    return result


def tito_process(
    *args: object,
    cwd: str | os.PathLike[str] | None = None,
    stdin: str = "",
    env: Mapping[str, str] | None = None,
    timeout: float = 180,
) -> subprocess.CompletedProcess[str]:
    """``python -m tito_cli ARGS`` as a process (no colour, wide lines), its output captured as text."""
    full = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "tito_cli", *(str(a) for a in args)],
        input=stdin,
        capture_output=True,
        text=True,
        env=full,
        cwd=Path(cwd) if cwd is not None else None,
        timeout=timeout,
    )
