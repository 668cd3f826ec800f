"""The one interface every importer implements, and what they share.

An importer reads one capture system's files and yields, per session, either
an :class:`ImportedSession` (its turns in order, the reward the source holds,
and what the source lacked and how it was filled) or an
:class:`~tito_cli.errors.InvalidSessionError` naming the file, line or row and
the reason the session cannot be mapped.  It never writes: the driver
(:mod:`tito_cli.capture.importing`) checks every turn against the write
contract (:mod:`tito_cli.capture.records`, the writer's own) and records the sessions through
:class:`~tito_cli.capture.writer.TurnLogWriter`.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, ClassVar

from ...errors import InvalidSessionError, SourceError
from ...turns import canonical_json

__all__ = [
    "ImportedSession",
    "ImportedTurn",
    "Importer",
    "NoImportOptions",
    "SessionOutcome",
    "SourceRef",
    "align_responses",
    "epoch_timestamp",
    "int_list",
    "iso_timestamp",
    "read_json_file",
    "read_json_lines",
    "reject",
    "reported_versions",
    "request_sampling",
]

@dataclass(frozen=True, slots=True)
class SourceRef:
    """Where a record came from: a file and a 1-based line (JSON Lines) or a row (a database table)."""

    file: str
    row: int | None = None
    unit: str = "line"

    def __str__(self) -> str:
        return self.file if self.row is None else f"{self.file}, {self.unit} {self.row}"


@dataclass(slots=True)
class ImportedTurn:
    """One generation call, mapped onto the turn-log columns (SPEC §2)."""

    prompt_ids: Sequence[int]
    output_ids: Sequence[int]
    output_logprobs: Sequence[float] | None
    finish_reason: str
    prompt_messages: list[Any]
    response_message: Any
    source: SourceRef
    tools: Any = None
    metadata: Any = None
    timestamp: datetime | None = None
    #: An explicit seq (kept from the source); ``None``: the session's arrival order.
    seq: int | None = None
    #: Provenance the source carries (docs/spec.md §2; ``None``: the source lacks it), passed to the
    #: writer as they are: weight versions (a str, or spans over the output token indices), routed
    #: experts rows ``[rows, layers, topk]`` from position ``routed_experts_start``, the sampling
    #: parameters sent upstream (a JSON object), the call kind (``agent`` or ``auxiliary``).
    weight_versions: Any = None
    routed_experts: Any = None
    routed_experts_start: int = 0
    sampling: Any = None
    call_kind: str | None = None


@dataclass(slots=True)
class SessionOutcome:
    """The sessions row a source holds for a session (its reward)."""

    reward: float | None
    index: int | None = None
    group_index: int | None = None
    label: str | None = None
    metadata: dict[str, Any] | None = None
    #: slime's rollout_id (docs/spec.md §8.8): the samples' rollout_id, else their index.
    rollout_id: int | None = None
    source: SourceRef | None = None


@dataclass(slots=True)
class ImportedSession:
    session_id: str
    turns: list[ImportedTurn]
    source: SourceRef
    outcome: SessionOutcome | None = None
    #: What this session's source lacked, each with how it was filled ("finish_reason: ... set to 'stop'").
    filled: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        """Record (once) something the source lacked and how it was filled."""
        if text not in self.filled:
            self.filled.append(text)


@dataclass(frozen=True, slots=True)
class NoImportOptions:
    """The options of a format that has none."""


class Importer(ABC):
    """One capture format.  Subclasses live one per module under ``capture/importers/``."""

    #: The FORMAT argument of ``tito import``.
    name: ClassVar[str]
    #: One line for ``tito import --help``.
    summary: ClassVar[str]
    #: What each source argument is, for error messages (``"JSONL file"``, ``"SQLite database"``).
    sources_hint: ClassVar[str]
    #: True when response messages are the server's serialisation, not the harness's own message.
    server_responses: ClassVar[bool] = False
    #: The format's own options (a dataclass; ``tito import`` refuses an option the format lacks).
    Options: ClassVar[type[Any]] = NoImportOptions

    def __init__(self, options: Any = None) -> None:
        self.options = options if options is not None else self.Options()

    @abstractmethod
    def sessions(self, sources: Sequence[Path]) -> Iterator[ImportedSession | InvalidSessionError]:
        """Every session the sources hold, or why it cannot be imported; unusable sources raise :class:`SourceError`."""

    def check_sources(self, sources: Sequence[Path]) -> None:
        if not sources:
            raise SourceError(f"{self.name}: give at least one {self.sources_hint}")
        for path in sources:
            if not path.exists():
                raise SourceError("no such file or folder", file=path)


def reject(message: str, ref: SourceRef, session_id: str) -> InvalidSessionError:
    """A session that cannot be imported.

    ``row`` is the 1-based line of a JSON Lines file or the table's row; a
    position of another kind (an ATIF step) goes into the message instead.
    """
    if ref.row is not None and ref.unit not in ("line", "row"):
        return InvalidSessionError(f"{ref.unit} {ref.row}: {message}", file=ref.file, session_id=session_id)
    return InvalidSessionError(message, file=ref.file, row=ref.row, session_id=session_id)


def read_json_lines(path: Path, *, id_key: str | None = None) -> Iterator[tuple[int, Any] | tuple[int, SourceError]]:
    """``(line number, value)`` per non-blank line; a line that is not usable JSON yields ``(line, SourceError)``.

    A UTF-8 byte-order mark at the start of the file is not part of the first
    line.  Not usable: malformed JSON, and JSON Python's parser gives up on
    (an integer of more than 4,300 digits, nesting deeper than its recursion
    limit).  The caller decides whether a broken line rejects a session or the
    whole source.  ``id_key``: for a line that is JSON but beyond the parser's
    limits, the error's ``session_id`` is the top-level string under this key,
    found without parsing the rest (``None`` when there is none).
    """
    try:
        handle = path.open(encoding="utf-8-sig")
    except OSError as exc:
        raise SourceError(f"cannot read ({exc.strerror})", file=path) from None
    with handle:
        try:
            for number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    yield number, json.loads(line)
                except json.JSONDecodeError as exc:
                    yield number, SourceError(f"not JSON ({exc.msg})", file=path, row=number)
                except (ValueError, RecursionError) as exc:
                    reason = "nested too deep" if isinstance(exc, RecursionError) else str(exc)
                    sid = top_level_string(line, id_key) if id_key is not None else None
                    yield number, SourceError(f"not usable JSON ({reason})", file=path, row=number, session_id=sid)
        except UnicodeDecodeError:
            raise SourceError("not UTF-8 text", file=path) from None


def _skip_value(text: str, at: int) -> int:
    """The index just past the JSON value starting at ``at`` (strings, arrays and objects by their brackets)."""
    depth = 0
    i = at
    while i < len(text):
        char = text[i]
        if char == '"':
            i = int(json.decoder.scanstring(text, i + 1)[1])  # type: ignore[attr-defined]
            if depth == 0:
                return i
            continue
        if char in "[{":
            depth += 1
        elif char in "]}":
            if depth == 0:
                return i  # the end of the object holding a scalar
            depth -= 1
            if depth == 0:
                return i + 1
        elif depth == 0 and char == ",":
            return i
        i += 1
    raise ValueError("unterminated value")


def top_level_string(text: str, key: str) -> str | None:
    """The string under ``key`` in the JSON object ``text``, read without parsing the other values.

    For lines Python's parser gives up on (a 5,000-digit integer, nesting
    100,000 deep) whose session can still be told: nothing is converted but
    the keys and the one string asked for.
    """
    try:
        i = text.index("{") + 1
        while True:
            while text[i] in " \t\r\n,":
                i += 1
            if text[i] != '"':
                return None
            name, i = json.decoder.scanstring(text, i + 1)  # type: ignore[attr-defined]
            while text[i] in " \t\r\n:":
                i += 1
            end = _skip_value(text, i)
            if name == key:
                value = json.loads(text[i:end])
                return value if isinstance(value, str) else None
            i = end
    except (ValueError, IndexError, RecursionError):
        return None


def read_json_file(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SourceError(f"cannot read ({exc.strerror})", file=path) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SourceError(f"not a JSON document ({exc})", file=path) from None


def _without_nulls(value: Any) -> Any:
    """``value`` without null-valued keys and empty ``tool_calls`` lists, at any depth."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None and not (k == "tool_calls" and v == [])}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def align_responses(session: ImportedSession) -> int:
    """Use, as a turn's response message, the message the harness sent back for it; returns how many changed.

    A server serialises the assistant message with null fields (vLLM:
    ``refusal``, ``audio``, ``function_call``, ``reasoning_content`` …, and
    ``tool_calls: []``); a harness usually sends it back without them.  The
    turn-log contract wants the message as the harness will send it (SPEC §3
    matches prompt messages to response messages by identity), so when a
    later turn's prompt holds an assistant message equal to this response
    once null fields are dropped on both sides, that message replaces the
    response.  A harness that changed anything else is left alone.
    """
    sent_back: dict[str, list[tuple[int, Any]]] = {}
    for position, turn in enumerate(session.turns):
        if not isinstance(turn.prompt_messages, list):
            continue
        for message in turn.prompt_messages:
            if isinstance(message, dict) and message.get("role") == "assistant":
                sent_back.setdefault(canonical_json(_without_nulls(message)), []).append((position, message))
    changed = 0
    for position, turn in enumerate(session.turns):
        response = turn.response_message
        if not isinstance(response, dict):
            continue
        exact = canonical_json(response)
        for later, message in sent_back.get(canonical_json(_without_nulls(response)), ()):
            if later > position:
                if canonical_json(message) != exact:
                    turn.response_message = message
                    changed += 1
                break
    return changed


def epoch_timestamp(value: Any) -> datetime | None:
    """Seconds since the epoch (int or float) as a UTC datetime; anything else: ``None``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    try:
        return datetime.fromtimestamp(value, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None


def iso_timestamp(value: Any) -> datetime | None:
    """An ISO 8601 string as a UTC datetime (naive times are taken as UTC); anything else: ``None``."""
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def int_list(value: Any) -> list[int] | None:
    """``value`` when it is a list (checked later against the write contract, :mod:`..records`), else ``None``."""
    return value if isinstance(value, list) else None


#: The request fields that are sampling parameters (OpenAI chat and Responses, Anthropic messages, vLLM and
#: SGLang extensions): what ``sampling`` keeps of a recorded request.
SAMPLING_KEYS = (
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "stop",
    "stop_sequences",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)


def request_sampling(request: Any) -> dict[str, Any] | None:
    """The sampling parameters a recorded request sent (its non-null :data:`SAMPLING_KEYS`); ``None``: none."""
    if not isinstance(request, dict):
        return None
    found = {key: request[key] for key in SAMPLING_KEYS if request.get(key) is not None}
    return found or None


def reported_versions(*sources: Any) -> Any:
    """The weight versions the first of ``sources`` that reports any holds (SGLang ``meta_info``, or the
    ``metadata`` of SGLang's and vLLM's OpenAI-compatible answers): its ``weight_versions`` spans, else
    its scalar ``weight_version`` as a str (one version for every output token); ``None``: none reported."""
    for source in sources:
        if not isinstance(source, dict):
            continue
        spans = source.get("weight_versions")
        if spans is not None:
            return spans
        version = source.get("weight_version")
        if version not in (None, "") and not isinstance(version, (bool, dict, list)):
            return str(version)
    return None
