"""The rejects report beside every output: one JSON line per session left out, and why (SPEC §7)."""

from __future__ import annotations

import json
from pathlib import Path

from .._atomic import StagedFile
from ..errors import OutputError

__all__ = ["RejectsReport", "rejects_path"]


def rejects_path(out: Path) -> Path:
    """``<out>.rejects.jsonl``; a ``{rollout_id}`` pattern in ``out`` becomes ``all``."""
    return out.with_name(out.name.replace("{rollout_id}", "all") + ".rejects.jsonl")


class RejectsReport:
    """Staged like a sink's files, so that it is published with them or not at all."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._staged: StagedFile | None = None

    def close(self, rejects: list[dict[str, object]]) -> StagedFile:
        """Write ``rejects`` (``Reject.to_dict()`` records, in session-id order) to a temporary."""
        try:
            self._staged = StagedFile(self.path)
            lines = (json.dumps(r, ensure_ascii=False) + "\n" for r in rejects)
            self._staged.path.write_text("".join(lines), encoding="utf-8")
        except OSError as exc:
            self.abort()
            raise OutputError(f"cannot write the rejects report ({exc})", file=self.path) from None
        return self._staged

    def abort(self) -> None:
        if self._staged is not None:
            self._staged.discard()
