"""Test-suite configuration."""

# The golden-dump plugin (installed through the pytest11 entry point when tito
# is pip-installed; named here so the suite also runs from a plain checkout).
pytest_plugins = ["tito_cli.pytest_plugin"]
