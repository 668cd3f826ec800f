"""Every command is documented: help text for it and each option, and a row in the README."""

from __future__ import annotations

import typer.main

from tito_cli.cli import app

from .helpers import REPO


def _commands() -> dict[str, object]:
    group = typer.main.get_command(app)
    return dict(group.commands)  # type: ignore[attr-defined]


def test_every_command_and_option_has_help() -> None:
    commands = _commands()
    assert {"rebuild", "inspect", "ls", "stats", "dump", "check", "simulate"} <= set(commands)
    for name, command in commands.items():
        assert (command.help or "").strip(), name  # type: ignore[attr-defined]
        for param in command.params:  # type: ignore[attr-defined]
            if param.param_type_name == "option" and param.name != "help":
                assert (param.help or "").strip(), f"{name} {param.opts}"


def test_every_command_is_in_the_readme_and_has_a_docs_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    docs = " ".join(p.read_text(encoding="utf-8") for p in (REPO / "docs").glob("*.md"))
    for name in _commands():
        assert f"`tito {name}" in readme, name
        assert f"tito {name}" in docs, name


def test_readme_shows_the_real_output_of_its_first_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The summary printed in the README is what rebuilding the shipped demo logs prints today."""
    from typer.testing import CliRunner

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "tito rebuild fixtures/logs --out samples.parquet" in readme
    shown = readme[readme.index("sessions rebuilt") : readme.index("wrote samples.parquet")].rstrip().splitlines()
    out = tmp_path / "samples.parquet"
    result = CliRunner().invoke(app, ["rebuild", str(REPO / "fixtures" / "logs"), "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    printed = result.stderr[: result.stderr.index("wrote ")].rstrip().splitlines()
    assert printed == shown
