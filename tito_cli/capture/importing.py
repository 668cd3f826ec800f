"""``import_traces``: another capture system's traces in, a tito turn log out.

The library function behind ``tito import``; it never prints.  An importer
(:mod:`tito_cli.capture.importers`) maps the source's records to turns; this
module checks each session against the turn-log contract, records the valid
ones through :class:`~tito_cli.capture.writer.TurnLogWriter` (so every
guarantee of the writer holds: atomic files, the schema, the tokenizer name),
attaches rewards, and reports every session: imported (with what the source
lacked and how it was filled) or rejected (file, line or row, reason).
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._targets import check_target, log_files_in, publish_folder, staging_folder, writing
from ..errors import OutputError, SourceError, TitoError
from ..turns import Reject
from .importers import IMPORTERS, importer_for
from .importers.base import (
    ImportedSession,
    ImportedTurn,
    Importer,
    SessionOutcome,
    SourceRef,
    read_json_lines,
    reject,
)
from .importers.base import (
    align_responses as _align,
)
from .provenance import experts_rows, provenance_cells
from .records import sessions_row, turn_row
from .writer import TurnLogWriter

__all__ = ["ImportSummary", "ImportedSessionReport", "import_traces", "read_rewards"]

#: The per-session report written beside the imported log (one JSON object a line).
REPORT_NAME = "import-report.jsonl"
#: The writer's file names: turns-import-000001.parquet, sessions-import-000001.parquet.
WRITER_NAME = "import"


@dataclass(slots=True)
class ImportedSessionReport:
    session_id: str
    turns: int
    #: Where the reward came from: "source", "rewards file", or None (no sessions row).
    reward_from: str | None
    filled: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "status": "imported",
            "turns": self.turns,
            "reward_from": self.reward_from,
            "filled": self.filled,
        }


@dataclass(slots=True)
class ImportSummary:
    format: str
    out: Path
    report_file: Path
    sessions: list[ImportedSessionReport] = field(default_factory=list)
    rejected: list[Reject] = field(default_factory=list)
    #: Sessions of the rewards file that no imported session matched.
    unused_rewards: list[str] = field(default_factory=list)
    files_written: list[Path] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return sum(s.turns for s in self.sessions)

    @property
    def sessions_without_reward(self) -> int:
        return sum(s.reward_from is None for s in self.sessions)

    def filled_counts(self) -> list[tuple[str, int]]:
        """Each note on what the source lacked, with the number of sessions it applies to."""
        counts = Counter(note for s in self.sessions for note in s.filled)
        return sorted(counts.items())


def read_rewards(path: str | os.PathLike[str]) -> dict[str, SessionOutcome]:
    """A rewards file: JSON Lines of ``session_id``, ``reward`` and optional ``index``,
    ``group_index``, ``label``, ``metadata``, ``rollout_id``.  Any unusable line is an error (nothing is imported)."""
    path = Path(path)
    if not path.is_file():
        raise SourceError("no such rewards file", file=path)
    outcomes: dict[str, SessionOutcome] = {}
    for number, record in read_json_lines(path):
        if isinstance(record, SourceError):
            raise record
        ref = SourceRef(str(path), number)
        try:
            problem = _rewards_problem(record)
        except OverflowError:  # an integer too large for a float: not a reward
            problem = "reward must be a finite number, got an integer beyond float"
        if problem:
            raise SourceError(problem, file=path, row=number, tip='each line: {"session_id": ..., "reward": ...}')
        sid = record["session_id"]
        if sid in outcomes:
            raise SourceError(f"session {sid!r} appears twice", file=path, row=number)
        outcomes[sid] = SessionOutcome(
            reward=None if record.get("reward") is None else float(record["reward"]),
            index=record.get("index"),
            group_index=record.get("group_index"),
            label=record.get("label"),
            metadata=record.get("metadata"),
            rollout_id=record.get("rollout_id"),
            source=ref,
        )
    return outcomes


def _rewards_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return "a line must be a JSON object"
    if not isinstance(record.get("session_id"), str):
        return "session_id must be a string"
    reward = record.get("reward")
    if reward is not None and (
        isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward)
    ):
        return f"reward must be a finite number, got {reward!r}"
    for key in ("index", "group_index", "rollout_id"):
        if record.get(key) is not None and type(record.get(key)) is not int:
            return f"{key} must be an integer"
    if record.get("label") is not None and not isinstance(record["label"], str):
        return "label must be a string"
    if record.get("metadata") is not None and not isinstance(record["metadata"], dict):
        return "metadata must be a JSON object"
    return None


def import_traces(
    format: str,
    sources: Iterable[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    rewards: str | os.PathLike[str] | None = None,
    tokenizer: str | None = None,
    session_header: str | None = None,
    align_responses: bool = True,
    overwrite: bool = False,
) -> ImportSummary:
    """Import ``sources`` of ``format`` (a name in :data:`~.importers.IMPORTERS`) into the log folder ``out``.

    Invalid sessions are left out and reported (``summary.rejected`` and
    ``<out>/import-report.jsonl``); every other session is written.  A source
    that cannot be read at all raises :class:`~tito_cli.errors.SourceError`
    and leaves ``out`` as it was: the new log is written into a hidden folder
    beside it and swapped in only when complete (``--overwrite`` replaces the
    old log's files, anything else in the folder stays).  Sessions stream
    from the importer to the writer, which flushes every ``max_rows`` rows.  ``align_responses``: where the source holds
    the server's serialisation of the response message, use the equal message
    the harness sent back instead (:func:`~.importers.base.align_responses`).
    """
    if format not in IMPORTERS:
        raise SourceError(f"unknown format {format!r}", tip=f"formats: {', '.join(IMPORTERS)}")
    out = Path(out)
    paths = [Path(p) for p in sources]
    reads = [*paths, *([Path(rewards)] if rewards is not None else [])]
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
    # Never a folder read (nor inside one, nor holding one), never a file or a symbolic link.
    check_target(out, overwrite=overwrite, reads=reads, folder=True)
    replaced = log_files_in(out, extra=[REPORT_NAME]) if out.is_dir() else []
    if replaced and not overwrite:
        raise OutputError("the folder already holds a log", file=out, tip="pass --overwrite to replace it")
    outcomes = read_rewards(rewards) if rewards is not None else {}
    try:
        importer = importer_for(format, {} if session_header is None else {"session_header": session_header})
    except ValueError as exc:
        raise SourceError(str(exc)) from None
    items = importer.sessions(paths)
    summary = ImportSummary(format=format, out=out, report_file=out / REPORT_NAME)
    # Written into a fresh folder beside ``out`` and swapped in once complete: nothing of the old log
    # is touched before every source has been read, and a failure leaves it as it was.
    staging = staging_folder(out)
    try:
        with writing(out):
            writer = TurnLogWriter(staging, tokenizer=tokenizer, max_age=None, name=WRITER_NAME)
        try:
            with writing(out):
                _import_sessions(summary, writer, items, importer, outcomes, align_responses)
                writer.close()
        except BaseException:
            # The writer is not closed: the rows it still buffers are never written.
            for path in writer.files_written:
                path.unlink(missing_ok=True)
            raise
        summary.unused_rewards = sorted(set(outcomes) - {s.session_id for s in summary.sessions})
        summary.rejected.sort(key=lambda r: r.session_id)
        with writing(out):
            _write_report(summary, staging / REPORT_NAME)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    publish_folder(staging, out, replaced)
    summary.files_written = [out / path.name for path in writer.files_written]
    return summary


def _import_sessions(
    summary: ImportSummary,
    writer: TurnLogWriter,
    items: Iterable[ImportedSession | TitoError],
    importer: Importer,
    outcomes: dict[str, SessionOutcome],
    align_responses: bool,
) -> None:
    seen: set[str] = set()
    for item in items:
        if isinstance(item, TitoError):
            summary.rejected.append(Reject(item.session_id or "", item.message, item.file, item.row))
            continue
        if item.session_id in seen:
            ref = item.source
            summary.rejected.append(
                Reject(item.session_id, "session id appears in two sources", ref.file, ref.row)
            )
            continue
        seen.add(item.session_id)
        if not item.turns:
            ref = item.source
            summary.rejected.append(Reject(item.session_id, "no generation call to import", ref.file, ref.row))
            continue
        if importer.server_responses and align_responses:
            aligned = _align(item)
            if aligned:
                item.note(
                    "response messages: the server's replaced by the equal message the harness sent back "
                    "(null fields dropped)"
                )
        try:
            problem = _check_session(item)
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            # A value no check foresaw (an integer too large for a float, nesting too deep): this session's.
            problem = (_unusable(exc), item.source)
        if problem is not None:
            reason, ref = problem
            error = reject(reason, ref, item.session_id)
            summary.rejected.append(Reject(item.session_id, error.message, error.file, error.row))
            continue
        try:
            summary.sessions.append(_record(writer, item, outcomes))
        except _WriterRefused as refused:
            ref = refused.turn.source
            error = reject(f"the capture writer refused the turn: {refused.reason}", ref, item.session_id)
            summary.rejected.append(Reject(item.session_id, error.message, error.file, error.row))


def _unusable(exc: Exception) -> str:
    return f"unusable value ({type(exc).__name__}: {exc})"


def _check_session(session: ImportedSession) -> tuple[str, SourceRef] | None:
    """The first reason the session breaks the turn-log contract, with the record it is about.

    Each turn is checked with the ``seq`` it will be recorded with (:func:`_seqs`): a rebuild
    rejects a session whose seqs repeat, whether the source gave them or they were filled in.
    """
    seqs: dict[int, ImportedTurn] = {}
    shape: tuple[int, ...] | None = None
    for turn, seq in zip(session.turns, _seqs(session), strict=True):
        boolean = _boolean_in(turn)
        if boolean is not None:
            return boolean, turn.source
        try:
            # What the writer will be asked to record: it must not refuse a turn after the first.
            turn_row(
                session.session_id,
                turn.prompt_ids,
                turn.output_ids,
                turn.output_logprobs or None,
                turn.finish_reason,
                turn.prompt_messages,
                turn.response_message,
                turn.tools,
                turn.metadata,
                seq=seq,
                timestamp=turn.timestamp,
            )
        except ValueError as exc:
            return str(exc), turn.source
        except (TypeError, OverflowError, RecursionError) as exc:
            return _unusable(exc), turn.source  # e.g. a 400-digit integer where a logprob belongs
        try:
            shape = _check_provenance(turn, shape)
        except ValueError as exc:
            return str(exc), turn.source
        except (TypeError, OverflowError, RecursionError) as exc:
            return _unusable(exc), turn.source
        if seq in seqs:
            if turn.seq is not None and seqs[seq].seq is not None:
                return f"seq {seq} appears twice", turn.source
            return (
                f"seq {seq} appears twice: a turn without a seq is numbered one past the highest before it, "
                "and another turn gives that seq (give every turn of a session a seq, or none)"
            ), turn.source
        seqs[seq] = turn
    return None


def _check_provenance(turn: ImportedTurn, shape: tuple[int, ...] | None) -> tuple[int, ...] | None:
    """The turn's provenance as the writer checks it; returns the session's routed-experts row shape so far."""
    provenance_cells(len(turn.output_ids), turn.weight_versions, turn.sampling, turn.call_kind)
    if turn.routed_experts is None:
        return shape
    rows, _ = experts_rows(turn.routed_experts, turn.routed_experts_start, len(turn.prompt_ids) + len(turn.output_ids))
    own = tuple(rows.shape[1:])
    if shape is not None and own != shape:
        raise ValueError(
            f"routed_experts rows are {own[0]} x {own[1]}, "
            f"but earlier calls of the session have {shape[0]} x {shape[1]}"
        )
    return own


def _boolean_in(turn: ImportedTurn) -> str | None:
    """JSON ``true``/``false`` among a turn's ids or logprobs (numpy would store them as 1 and 0)."""
    for name, what in (("prompt_ids", "a token id"), ("output_ids", "a token id"), ("output_logprobs", "a number")):
        values = getattr(turn, name)
        # The types are collected in C: a few milliseconds for 100,000 ids, paid by imports only.
        if isinstance(values, (list, tuple)) and bool in set(map(type, values)):
            return f"{name} holds a boolean (JSON true/false), not {what}"
    return None


def _seqs(session: ImportedSession) -> list[Any]:
    """The seq each turn is recorded with: the source's, else one past the highest before it (arrival order)."""
    seqs: list[Any] = []
    next_seq = 0
    for turn in session.turns:
        seq = turn.seq if turn.seq is not None else next_seq
        seqs.append(seq)
        if isinstance(seq, int) and not isinstance(seq, bool):
            next_seq = max(next_seq, seq + 1)
    return seqs


class _WriterRefused(Exception):
    def __init__(self, turn: ImportedTurn, reason: str) -> None:
        super().__init__(reason)
        self.turn, self.reason = turn, reason


def _record(
    writer: TurnLogWriter, session: ImportedSession, outcomes: dict[str, SessionOutcome]
) -> ImportedSessionReport:
    """Record a checked session.  The writer validates each turn too: should it refuse the first
    turn, nothing of the session is buffered and it is rejected; refusing a later one would leave
    part of the session in the log, which :func:`_check_session` (the same contract) rules out."""
    outcome = session.outcome
    reward_from: str | None = "source"
    if outcome is None:
        outcome = outcomes.get(session.session_id)
        reward_from = "rewards file" if outcome is not None else None
    if outcome is not None and session.turns:
        # Checked before any turn is buffered: a refused sessions row rejects the session whole.
        try:
            sessions_row(
                session.session_id,
                outcome.reward,
                index=outcome.index,
                group_index=outcome.group_index,
                label=outcome.label,
                metadata=outcome.metadata,
                rollout_id=outcome.rollout_id,
            )
        except ValueError as exc:
            raise _WriterRefused(session.turns[0], f"its sessions row: {exc}") from exc
    for position, (turn, seq) in enumerate(zip(session.turns, _seqs(session), strict=True)):
        try:
            _record_turn(writer, session.session_id, turn, seq)
        except (ValueError, TypeError, OverflowError, TitoError) as exc:
            if position:
                raise RuntimeError(
                    f"session {session.session_id!r}: the capture writer refused turn {position} "
                    f"after accepting the earlier ones ({exc}); the turn-log check missed what it checks"
                ) from exc
            raise _WriterRefused(turn, str(exc)) from exc
    if outcome is not None:
        writer.finish_session(
            session.session_id,
            outcome.reward,
            index=outcome.index,
            group_index=outcome.group_index,
            label=outcome.label,
            metadata=outcome.metadata,
            rollout_id=outcome.rollout_id,
        )
    return ImportedSessionReport(session.session_id, len(session.turns), reward_from, list(session.filled))


def _record_turn(writer: TurnLogWriter, session_id: str, turn: ImportedTurn, seq: int) -> None:
    writer.record_turn(
        session_id,
        turn.prompt_ids,
        turn.output_ids,
        turn.output_logprobs or None,
        turn.finish_reason,
        turn.prompt_messages,
        turn.response_message,
        tools=turn.tools,
        metadata=turn.metadata,
        seq=seq,
        timestamp=turn.timestamp,
        weight_versions=turn.weight_versions,
        routed_experts=turn.routed_experts,
        routed_experts_start=turn.routed_experts_start,
        sampling=turn.sampling,
        call_kind=turn.call_kind,
    )


def _write_report(summary: ImportSummary, path: Path) -> None:
    lines = [s.to_dict() for s in summary.sessions]
    lines += [{"status": "rejected", **r.to_dict()} for r in summary.rejected]
    lines.sort(key=lambda line: (str(line["session_id"]), str(line["status"])))
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
