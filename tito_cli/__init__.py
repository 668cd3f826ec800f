"""tito: rebuild token-level RL training samples from recorded agent-session turn logs.

The public API, in the order data flows through it::

    TurnLogWriter        a live harness records turns and finished sessions (capture/writer.py)
    import_traces        another capture system's traces -> a turn log, with a per-session report
                         (capture/importing.py; one importer per format in capture/importers/)
    export_exchanges     a turn log -> openai-exchanges JSONL and a rewards file (export/openai_exchanges.py)
    Corpus               a turn log opened for rebuilding, one session at a time (run/corpus.py)
    rebuild_session      one session's turns -> routing tree -> samples, plus a report (algorithm/session.py)
    rebuild              a whole log -> samples.parquet (or a trainer format) + rejects report (run/rebuild.py)
    export_samples       a samples file -> slime / SkyRL / TRL files (run/export.py; docs/export.md)
    rebuild_from         another system's traces -> samples, through a temporary log (run/rebuild_from.py)
    Policy               a named policy and its knobs: Policy.named("slime-0.3", fork_threshold=1024)
    register_policy, register_output_format, register_importer
                         add a plug-in (a class with name, summary, Options) from outside the package
                         (tito_cli/plugins.py; docs/architecture.md, "Plug-ins")

docs/architecture.md draws the whole layout.
Everything else is reachable through its module; names not listed here may
change between releases.  Importing this package never imports transformers.
"""

from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    from .algorithm.policy import DEFAULT_FORK_THRESHOLD, Policy, register_policy
    from .algorithm.session import SessionReport, SessionResult, rebuild_session
    from .capture.importers import register_importer
    from .capture.importing import ImportSummary, import_traces
    from .capture.writer import TurnLogWriter
    from .errors import (
        ExportError,
        InvalidSessionError,
        LogError,
        MissingDependencyError,
        OutputError,
        SchemaError,
        SourceError,
        TitoError,
        TokenizerError,
        UnknownSessionError,
        UnreadableLogError,
    )
    from .export.formats import register_output_format
    from .export.openai_exchanges import export_exchanges
    from .run.corpus import Corpus
    from .run.export import ExportSummary, export_samples
    from .run.rebuild import RebuildSummary, rebuild
    from .run.rebuild_from import rebuild_from
    from .turns import Reject, SessionInfo, Turn

__version__ = "0.1.0"

# The public names are imported on first use, not with the package: the command
# line sets native libraries' options before they load (tito_cli/cli/native_env.py).
_HOME = {
    "TurnLogWriter": "capture.writer",
    "ImportSummary": "capture.importing",
    "import_traces": "capture.importing",
    "export_exchanges": "export.openai_exchanges",
    "rebuild_from": "run.rebuild_from",
    "SourceError": "errors",
    "Corpus": "run.corpus",
    "Reject": "turns",
    "SessionReport": "algorithm.session",
    "SessionResult": "algorithm.session",
    "rebuild_session": "algorithm.session",
    "ExportError": "errors",
    "register_policy": "algorithm.policy",
    "register_importer": "capture.importers",
    "register_output_format": "export.formats",
    "ExportSummary": "run.export",
    "export_samples": "run.export",
    "InvalidSessionError": "errors",
    "LogError": "errors",
    "MissingDependencyError": "errors",
    "OutputError": "errors",
    "SchemaError": "errors",
    "TitoError": "errors",
    "TokenizerError": "errors",
    "UnknownSessionError": "errors",
    "UnreadableLogError": "errors",
    "DEFAULT_FORK_THRESHOLD": "algorithm.policy",
    "Policy": "algorithm.policy",
    "RebuildSummary": "run.rebuild",
    "rebuild": "run.rebuild",
    "SessionInfo": "turns",
    "Turn": "turns",
}


def __getattr__(name: str) -> typing.Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{home}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_HOME))


__all__ = [
    "DEFAULT_FORK_THRESHOLD",
    "Corpus",
    "ExportError",
    "ExportSummary",
    "ImportSummary",
    "InvalidSessionError",
    "LogError",
    "MissingDependencyError",
    "OutputError",
    "Policy",
    "RebuildSummary",
    "Reject",
    "SchemaError",
    "SessionInfo",
    "SessionReport",
    "SessionResult",
    "SourceError",
    "TitoError",
    "TokenizerError",
    "Turn",
    "TurnLogWriter",
    "UnknownSessionError",
    "UnreadableLogError",
    "__version__",
    "export_exchanges",
    "export_samples",
    "import_traces",
    "rebuild",
    "rebuild_from",
    "rebuild_session",
    "register_importer",
    "register_output_format",
    "register_policy",
]
