"""``rebuild``: a turn log in, a samples file and a rejects report out.

This is the library function behind ``tito rebuild``; it never prints.
Progress reaches the caller through ``progress(done, total)``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .atomic import atomic_path
from .engine import SessionReport, rebuild_session
from .errors import InvalidSessionError, OutputError
from .policy import Policy
from .samples import SamplesWriter
from .turnlog import TurnLog, parse_session

__all__ = ["Reject", "RebuildSummary", "rebuild", "rejects_path"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Reject:
    """A session left out of the output, and why."""

    session_id: str
    reason: str
    file: str | None
    row: int | None

    def to_json(self) -> str:
        return json.dumps(
            {"session_id": self.session_id, "file": self.file, "row": self.row, "reason": self.reason},
            ensure_ascii=False,
        )


@dataclass(slots=True)
class RebuildSummary:
    out: Path
    rejects_file: Path
    sessions: int = 0
    totals: SessionReport = field(default_factory=SessionReport)
    #: Sessions rebuilt that yielded no sample at all.
    sessions_without_samples: int = 0
    #: Sessions rebuilt without a sessions row (reward 0.0, null index fields).
    sessions_without_row: int = 0
    #: Sessions rows whose session has no turns (nothing to rebuild).
    rows_without_turns: list[str] = field(default_factory=list)
    rejected: list[Reject] = field(default_factory=list)
    tokenizer: str | None = None


def rejects_path(out: Path) -> Path:
    return out.with_name(out.name + ".rejects.jsonl")


def rebuild(
    inputs: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    policy: Policy | None = None,
    *,
    overwrite: bool = False,
    progress: Progress | None = None,
) -> RebuildSummary:
    """Rebuild every session under ``inputs`` into ``out`` (Parquet, SPEC §5).

    Invalid sessions are left out and listed in ``<out>.rejects.jsonl``;
    unreadable files raise :class:`~tito_cli.errors.LogError` before anything
    is written.  Both files appear atomically.
    """
    policy = policy or Policy()
    out = Path(out)
    rejects_file = rejects_path(out)
    if out.exists() and not overwrite:
        raise OutputError("output exists", file=out, tip="pass --overwrite to replace it")
    if not out.parent.is_dir():
        raise OutputError("the output's folder does not exist", file=out)

    log = TurnLog.open([Path(p) for p in inputs], exclude=[out])
    sessions_table = log.read_sessions()
    summary = RebuildSummary(out=out, rejects_file=rejects_file, tokenizer=log.tokenizer)
    rejected: dict[str, Reject] = {
        sid: Reject(sid, reason, ref.file, ref.row) for sid, (reason, ref) in sessions_table.invalid.items()
    }
    seen: set[str] = set()
    # Every file's footer was read; count sessions from the data as it streams.
    total_rows = log.num_turn_rows
    done_rows = 0
    try:
        writer = SamplesWriter(out, policy, tokenizer=log.tokenizer)
    except OSError as exc:
        raise OutputError(f"cannot write ({exc})", file=out) from None
    with writer:
        for rows in log.iter_sessions():
            seen.add(rows.session_id)
            done_rows += len(rows.rows)
            if rows.session_id in rejected:
                pass
            else:
                try:
                    turns = parse_session(rows)
                except InvalidSessionError as exc:
                    rejected[rows.session_id] = Reject(rows.session_id, exc.message, exc.file, exc.row)
                else:
                    info = sessions_table.infos.get(rows.session_id)
                    result = rebuild_session(rows.session_id, turns, info, policy)
                    writer.add(result)
                    summary.sessions += 1
                    summary.totals.add(result.report)
                    if result.report.missing_sessions_row:
                        summary.sessions_without_row += 1
                    if not result.samples:
                        summary.sessions_without_samples += 1
            if progress is not None:
                progress(done_rows, total_rows)
    # The samples file is in place; the rejects report follows it (both atomic).
    summary.rows_without_turns = sorted(set(sessions_table.infos) - seen)
    summary.rejected = sorted(rejected.values(), key=lambda r: r.session_id)
    with atomic_path(rejects_file) as tmp:
        tmp.write_text("".join(r.to_json() + "\n" for r in summary.rejected), encoding="utf-8")
    return summary
