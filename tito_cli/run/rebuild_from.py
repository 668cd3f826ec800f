"""``rebuild_from``: import another capture system's traces into a temporary log, then rebuild it.

The library function behind ``tito rebuild --from FORMAT``.  The sessions the
import rejects join the rebuild's rejects report, so one report lists every
session left out, whichever step left it out.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .._targets import check_target
from ..algorithm.policy import Policy
from ..capture.importing import ImportSummary, import_traces
from ..turns import Reject
from .rebuild import RebuildSummary, rebuild

__all__ = ["rebuild_from"]


def rebuild_from(
    format: str,
    sources: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    policy: Policy | None = None,
    *,
    rewards: str | os.PathLike[str] | None = None,
    tokenizer: str | None = None,
    session_header: str | None = None,
    align_responses: bool = True,
    overwrite: bool = False,
    **rebuild_options: Any,
) -> tuple[ImportSummary, RebuildSummary]:
    """Import ``sources`` (see :func:`~tito_cli.capture.importing.import_traces`) and rebuild them into ``out``.

    ``rebuild_options`` are :func:`~tito_cli.run.rebuild.rebuild`'s (``workers``,
    ``batch_bytes``, ``progress``).  The temporary log lives beside ``out`` and
    is removed afterwards.
    """
    out = Path(out)
    paths = [Path(p) for p in sources]
    # Checked before anything is imported (the rebuild checks it again against the imported log).
    check_target(out, overwrite=overwrite, reads=paths)
    with tempfile.TemporaryDirectory(prefix=f".{out.name}.import-", dir=out.parent) as scratch:
        log = Path(scratch) / "log"
        imported = import_traces(
            format,
            paths,
            log,
            rewards=rewards,
            tokenizer=tokenizer,
            session_header=session_header,
            align_responses=align_responses,
        )
        # In the rebuild's own rejects report, published together with its output.
        rejected = [Reject(r.session_id, r.reason, r.file, r.row) for r in imported.rejected]
        rebuilt = rebuild([log], out, policy, overwrite=overwrite, extra_rejects=rejected, **rebuild_options)
    return imported, rebuilt
