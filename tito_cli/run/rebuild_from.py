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

from ..algorithm.policy import Policy
from ..capture.importing import ImportSummary, import_traces
from ..export.rejects import rejects_path
from ..turns import Reject
from .output import check_outputs
from .rebuild import Progress, RebuildOptions, RebuildSummary, rebuild_with

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
    run: RebuildOptions | None = None,
    progress: Progress | None = None,
) -> tuple[ImportSummary, RebuildSummary]:
    """Import ``sources`` (see :func:`~tito_cli.capture.importing.import_traces`) and rebuild them into ``out``.

    ``run``: how to rebuild (:class:`~tito_cli.run.rebuild.RebuildOptions`: ``overwrite``,
    ``workers``, the output format...).  The temporary log lives beside ``out`` and
    is removed afterwards.
    """
    run = run or RebuildOptions()
    out = Path(out)
    paths = [Path(p) for p in sources]
    # Checked before anything is imported (rebuild() checks it again against the imported log): the same check.
    check_outputs(out, overwrite=run.overwrite, rejects_file=rejects_path(out), reads=paths)
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
        rebuilt = rebuild_with([log], out, policy, run, progress=progress, extra_rejects=rejected)
    return imported, rebuilt
