"""tito: rebuild token-level RL training samples from recorded agent-session turn logs.

The public API, in the order data flows through it::

    TurnLogWriter        a live harness records turns and finished sessions (capture.py)
    Corpus               a turn log opened for rebuilding, one session at a time (corpus.py)
    rebuild_session      one session's turns -> routing tree -> samples, plus a report (engine.py)
    rebuild              a whole log -> samples.parquet + rejects report (rebuild.py)
    Policy               the fork threshold and reward mode (policy.py)

Everything else is reachable through its module; names not listed here may
change between releases.  Importing this package never imports transformers.
"""

from __future__ import annotations

from .capture import TurnLogWriter
from .corpus import Corpus, Reject
from .engine import SessionReport, SessionResult, rebuild_session
from .errors import (
    InvalidSessionError,
    LogError,
    OutputError,
    SchemaError,
    TitoError,
    TokenizerError,
    UnknownSessionError,
    UnreadableLogError,
)
from .policy import DEFAULT_FORK_THRESHOLD, Policy
from .rebuild import RebuildSummary, rebuild
from .turns import SessionInfo, Turn

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_FORK_THRESHOLD",
    "Corpus",
    "InvalidSessionError",
    "LogError",
    "OutputError",
    "Policy",
    "RebuildSummary",
    "Reject",
    "SchemaError",
    "SessionInfo",
    "SessionReport",
    "SessionResult",
    "TitoError",
    "TokenizerError",
    "Turn",
    "TurnLogWriter",
    "UnknownSessionError",
    "UnreadableLogError",
    "__version__",
    "rebuild",
    "rebuild_session",
]
