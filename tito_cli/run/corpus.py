"""Many sessions: open a log once, then rebuild its sessions one by one.

The one per-session step is :func:`rebuild_rows` (rows → validated turns →
session result, or a :class:`Reject`) and :func:`session_output` (… → the
samples table a sink receives).  ``Corpus.results`` (``inspect``, ``ls``,
``stats``, the golden dumps), the local runner's workers and the Ray
runner all call them, so every command sees exactly the samples ``rebuild``
writes, and the rule "an invalid sessions row rejects its session" is
written once, here.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pyarrow as pa

from .._memory import release_freed_memory
from ..algorithm.policy import Policy, default_policy
from ..algorithm.session import SessionReport, SessionResult, rebuild_session
from ..errors import InvalidSessionError, UnknownSessionError
from ..export.samples import session_table
from ..read.index_pass import FileMap
from ..read.rows import SessionRows
from ..read.sessions import SessionsTable
from ..read.turnlog import TurnLog
from ..read.validate import parse_session
from ..turns import Reject, RowRef, SessionInfo

__all__ = [
    "UNFINISHED_REASON",
    "Corpus",
    "SessionFacts",
    "SessionOutput",
    "Unfinished",
    "find_session_id",
    "rebuild_rows",
    "reject_unfinished",
    "session_output",
]

#: What to do with a session that has turns but no sessions row (its harness died before
#: finishing it): ``keep`` rebuilds it with reward 0.0 (and marks its samples), ``reject``
#: leaves it out and lists it in the rejects report.
Unfinished = Literal["keep", "reject"]

UNFINISHED_REASON = "no sessions row: the session was not finished (--unfinished reject)"

#: A function a runner calls on each rebuilt session for counts the summary adds up (drift
#: classes: ``tito_cli.report.drift.DriftClassCounter``); picklable, as it goes to workers.
SessionFacts = Callable[[SessionResult], dict[str, int]]


@dataclass(slots=True)
class SessionOutput:
    """What a sink and the run's summary need from one rebuilt session."""

    session_id: str
    #: The session's sample rows (:func:`~tito_cli.export.samples.session_table`); ``None`` while
    #: parked in a spill file or on its way from a worker (``handoff``).
    table: pa.Table | None
    report: SessionReport
    #: (file, first record batch, record batches) of the rows in a worker's handoff file.
    handoff: tuple[str, int, int] | None = None


class Corpus:
    """A turn log opened for rebuilding: files classified, sessions table read.

    Opening needs no policy; each rebuild (:meth:`results`, :meth:`session`)
    names the one it uses.  ``unfinished="reject"`` rejects the sessions that
    have turns but no sessions row.
    """

    def __init__(self, log: TurnLog, *, unfinished: Unfinished = "keep") -> None:
        self.log = log
        self.unfinished: Unfinished = unfinished
        self.sessions_table: SessionsTable = log.read_sessions()
        if unfinished == "reject":
            reject_unfinished(self.sessions_table, log)

    @classmethod
    def open(
        cls,
        inputs: Iterable[str | os.PathLike[str]],
        *,
        exclude: Iterable[Path] = (),
        map_files: FileMap | None = None,
        unfinished: Unfinished = "keep",
    ) -> Corpus:
        """Classify and index the log's files (every use of a corpus needs its index), then read its sessions table.

        ``map_files``: a worker pool's ``map``, to open the files in parallel
        (see :meth:`TurnLog.open`).
        """
        log = TurnLog.open([Path(p) for p in inputs], exclude=exclude, index=True, map_files=map_files)
        corpus = cls(log, unfinished=unfinished)
        # Opening peaks (every turn's session and seq at once, then the sessions table), and what it freed
        # stays resident unless handed back: at 100k sessions, 60 MiB more through the whole rebuild.
        release_freed_memory()
        return corpus

    @property
    def tokenizer(self) -> str | None:
        return self.log.tokenizer

    def session_ids(self) -> Sequence[str]:
        """Every session id with turns, in code-point order."""
        return self.log.session_ids()

    def results(
        self, policy: Policy | None = None, only: Iterable[str] | None = None
    ) -> Iterator[SessionResult | Reject]:
        """Rebuild each session (or those in ``only``) under ``policy`` (default: slime-v4), in session-id order.

        Yields a :class:`SessionResult` per valid session and a :class:`Reject`
        per invalid one (including sessions whose sessions row is unusable).
        """
        policy = policy or default_policy()
        wanted = None if only is None else set(only)
        for rows in self.log.iter_sessions(only=wanted):
            yield rebuild_rows(rows, self.sessions_table.infos, self.sessions_table.invalid, policy)

    def session(self, session_id_or_prefix: str, policy: Policy | None = None) -> SessionResult | Reject:
        """One session by exact id or unique prefix."""
        sid = find_session_id(self.session_ids(), session_id_or_prefix)
        for result in self.results(policy, only=[sid]):
            return result
        raise UnknownSessionError(f"no session {sid!r}")  # pragma: no cover - ids come from the log


def reject_unfinished(table: SessionsTable, log: TurnLog) -> None:
    """Mark every session with turns but no sessions row invalid, at its last turn row."""
    index = log.index()
    for sid, place in index.places.items():
        if sid in table.infos or sid in table.invalid:
            continue
        group = index.row_groups[int(place.groups[-1])]
        row = group.first_row + int(place.rows[-1])
        table.invalid[sid] = (UNFINISHED_REASON, RowRef(str(log.turn_files[group.file].path), row))


def rebuild_rows(
    rows: SessionRows,
    infos: Mapping[str, SessionInfo],
    invalid: dict[str, tuple[str, RowRef]],
    policy: Policy,
) -> SessionResult | Reject:
    """One session's raw rows → its result, or a :class:`Reject` when its rows or sessions row are unusable."""
    sid = rows.session_id
    if sid in invalid:
        reason, ref = invalid[sid]
        return Reject(sid, reason, ref.file, ref.row)
    try:
        turns = parse_session(rows, policy.message_key)
    except InvalidSessionError as exc:
        return Reject(sid, exc.message, exc.file, exc.row)
    try:
        return rebuild_session(sid, turns, infos.get(sid), policy)
    except InvalidSessionError as exc:
        # Found only when used: routed experts that do not decompress (rebuild --routed-experts).
        return Reject(sid, exc.message, exc.file, exc.row)
    except RecursionError:
        # JSON that parsed but nests deeper than the router's recursion can follow.
        first = rows.rows[0].source if rows.rows else None
        return Reject(sid, "JSON nested too deeply", first.file if first else None, first.row if first else None)


def session_output(
    rows: SessionRows,
    infos: Mapping[str, SessionInfo],
    invalid: dict[str, tuple[str, RowRef]],
    policy: Policy,
    count_drift: SessionFacts | None = None,
) -> SessionOutput | Reject:
    """One session's raw rows → its samples table and counts (what runners hand on), or a :class:`Reject`.

    ``count_drift`` fills the report's ``drift_classes`` (see :func:`~tito_cli.run.rebuild.rebuild`).
    """
    result = rebuild_rows(rows, infos, invalid, policy)
    if isinstance(result, Reject):
        return result
    if count_drift is not None:
        result.report.drift_classes = count_drift(result)
    output = SessionOutput(result.session_id, session_table(result), result.report)
    result.tree.release()
    return output


def find_session_id(session_ids: Sequence[str], query: str) -> str:
    """Resolve an exact id or a unique prefix; raise listing candidates otherwise."""
    if query in session_ids:
        return query
    matches = [sid for sid in session_ids if sid.startswith(query)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        close = [sid for sid in session_ids if query.lower() in sid.lower()][:20]
        if not close:  # a near miss: a typo, a digit off, a wrong separator
            close = difflib.get_close_matches(query, session_ids, n=5, cutoff=0.6)
        raise UnknownSessionError(
            f"no session matches {query!r} ({len(session_ids)} sessions in the log)",
            candidates=close,
            suggestions=True,
            tip="run 'tito ls' to list the sessions" if not close else None,
        )
    raise UnknownSessionError(
        f"{query!r} matches {len(matches)} sessions; give more of the id",
        candidates=matches[:20] + ([f"… and {len(matches) - 20} more"] if len(matches) > 20 else []),
    )
