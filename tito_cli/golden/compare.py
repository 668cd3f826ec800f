"""Golden dumps on disk: write them, compare a log against them, accept changes.

Nothing here prints; :func:`check_goldens` returns a :class:`CheckReport`
that ``tito check``, the pytest plugin and ``--json`` each render their way.

The rules follow snapshot testing's soundness: a session whose dump differs
(*changed*), a session without a dump (*new*) and a dump without a session
(*stale*) all fail the check; files change only when the caller asks for an
update, never as a side effect of checking.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import NoReturn

from .._atomic import atomic_path
from ..algorithm.policy import Policy, default_policy
from ..errors import OutputError
from ..run.corpus import Corpus, Unfinished, find_session_id
from ..tokenizer import TokenizerChoice, TokenText
from .serialize import (
    DUMP_HEADER,
    DumpStyle,
    TokenWords,
    dump_file_name,
    dump_session,
    escape_invisible,
    golden_token_text,
)

__all__ = [
    "CheckReport",
    "DiffLine",
    "DumpSummary",
    "GoldenOptions",
    "SessionCheck",
    "SessionDump",
    "Status",
    "check_goldens",
    "iter_dumps",
    "unified_diff",
    "write_dumps",
]

Inputs = Iterable[str | os.PathLike[str]]


@dataclass(frozen=True, slots=True)
class GoldenOptions:
    """How dumps are made; a check must use the options the goldens were written with."""

    policy: Policy = field(default_factory=default_policy)
    style: DumpStyle = "full"
    #: Where to find the log's tokenizer: a folder, or a :class:`~tito_cli.tokenizer.TokenizerChoice`.
    tokenizer: TokenizerChoice | str | os.PathLike[str] | None = None
    #: False: dump token ids even when a tokenizer is available.
    decode: bool = True
    #: Processes making dumps in parallel (1: in this process).  The dumps are
    #: the same for any number: each session's dump depends on that session alone.
    workers: int = 1
    #: Sessions without a sessions row: rebuilt (``keep``) or dumped as rejected.
    unfinished: Unfinished = "keep"


@dataclass(frozen=True, slots=True)
class SessionDump:
    session_id: str
    file_name: str
    text: str


class Status(str, Enum):
    PASSED = "passed"
    #: The rebuilt dump differs from the golden one.
    CHANGED = "changed"
    #: The log has the session, the golden folder has no dump of it.
    NEW = "new"
    #: The golden folder has a dump of a session the log does not have.
    STALE = "stale"


@dataclass(slots=True)
class SessionCheck:
    session_id: str
    status: Status
    #: The golden file (``golden_dir / name``, as the caller spelled ``golden_dir``).
    file: Path
    golden: str | None = None
    rebuilt: str | None = None

    def diff(self, context: int = 3) -> list[DiffLine]:
        """``-golden`` / ``+rebuilt`` unified diff (empty unless the session changed)."""
        if self.status is not Status.CHANGED or self.golden is None or self.rebuilt is None:
            return []
        return unified_diff(self.golden, self.rebuilt, str(self.file), self.session_id, context)


@dataclass(slots=True)
class CheckReport:
    golden_dir: Path
    checks: list[SessionCheck]
    #: True when the check was run with ``update``: failing dumps were rewritten or removed.
    updated: bool = False
    #: Whether stale dumps were looked for (not when only some sessions were checked).
    stale_checked: bool = True
    #: Whether the golden folder existed (a typo in --golden makes every session "new").
    golden_existed: bool = True

    def count(self, status: Status) -> int:
        return sum(1 for c in self.checks if c.status is status)

    @property
    def failures(self) -> list[SessionCheck]:
        return [c for c in self.checks if c.status is not Status.PASSED]

    @property
    def ok(self) -> bool:
        """All sessions pass (after an update, everything that failed has been fixed)."""
        return self.updated or not self.failures

    def counts(self) -> dict[str, int]:
        return {s.value: self.count(s) for s in Status}


@dataclass(frozen=True, slots=True)
class DiffLine:
    """One line of a diff: ``kind`` is ``-``, ``+``, `` `` (context), ``@`` (hunk), ``…`` (skipped) or ``header``."""

    kind: str
    text: str


@dataclass(slots=True)
class DumpSummary:
    out_dir: Path
    written: list[Path] = field(default_factory=list)
    #: Files whose content was already identical (rewritten anyway is pointless, so skipped).
    unchanged: list[Path] = field(default_factory=list)
    #: Stale dumps (of no session of the log) removed with ``update``.
    removed: list[Path] = field(default_factory=list)


# -- producing dumps ------------------------------------------------------------


def iter_dumps(
    inputs: Inputs, options: GoldenOptions | None = None, only: Sequence[str] | None = None
) -> Iterator[SessionDump]:
    """Rebuild the sessions of a log (or ``only`` these ids / unique prefixes) and dump each.

    Sessions come in session-id order; a rejected session is dumped too (its
    reason), so a session that becomes invalid fails a check instead of vanishing.
    """
    # Open the log and resolve ids now, so bad input fails before any caller writes anything.
    options = options or GoldenOptions()
    paths = [Path(p) for p in inputs]
    corpus = Corpus.open(paths, unfinished=options.unfinished)
    wanted = None
    if only is not None:
        ids = corpus.session_ids()
        wanted = sorted({find_session_id(ids, query) for query in only})
    search_from = [p if p.is_dir() else p.parent for p in paths]
    tokens = golden_token_text(corpus.tokenizer, search_from, override=options.tokenizer, decode=options.decode)
    known_files = [str(f.path) for f in corpus.log.files]
    ids = wanted if wanted is not None else list(corpus.session_ids())
    # Before any dump is made, so that a clash never leaves a partial golden set behind.
    _check_names(ids)
    if options.workers > 1:
        return _parallel_dumps(paths, options, ids, search_from)
    return _dumps(corpus, wanted, options, tokens, known_files)


def _dumps(
    corpus: Corpus, wanted: list[str] | None, options: GoldenOptions, tokens: TokenText, known_files: list[str]
) -> Iterator[SessionDump]:
    words = TokenWords(tokens)
    for result in corpus.results(options.policy, only=wanted):
        text = dump_session(result, options.policy, words, options.style, known_files=known_files)
        yield SessionDump(result.session_id, dump_file_name(result.session_id), text)


def _check_names(session_ids: Iterable[str]) -> None:
    """Raise if two sessions would share a dump file, on any file system."""
    names: dict[str, str] = {}
    for session_id in session_ids:
        # safe_filename never maps two ids to one name, but a case-insensitive
        # file system (macOS, Windows; and Linux folders with casefold) would still
        # merge "A.txt" and "a.txt".
        file_name = dump_file_name(session_id)
        other = names.setdefault(file_name.casefold(), session_id)
        if other != session_id:
            raise OutputError(
                f"sessions {other!r} and {session_id!r} would share the dump file {file_name!r} "
                "on a case-insensitive file system; nothing was written",
                tip="dump them one at a time (tito dump LOGS --session ID --out -)",
            )


# Per worker process: the log opened once and the decoder loaded once (_start_worker).
_WORKER: tuple[Corpus, GoldenOptions, TokenText, list[str]] | None = None


def _start_worker(paths: list[Path], options: GoldenOptions, search_from: list[Path]) -> None:
    global _WORKER
    corpus = Corpus.open(paths, unfinished=options.unfinished)
    tokens = golden_token_text(corpus.tokenizer, search_from, override=options.tokenizer, decode=options.decode)
    _WORKER = (corpus, options, tokens, [str(f.path) for f in corpus.log.files])


def _dump_chunk(session_ids: list[str]) -> list[SessionDump]:
    assert _WORKER is not None, "worker not started"
    corpus, options, tokens, known_files = _WORKER
    return list(_dumps(corpus, session_ids, options, tokens, known_files))


def _parallel_dumps(
    paths: list[Path], options: GoldenOptions, session_ids: list[str], search_from: list[Path]
) -> Iterator[SessionDump]:
    """Dumps made by ``options.workers`` processes, in session-id order."""
    from ..run.lifetime import new_pool
    from ..run.pool import worker_context

    # Contiguous chunks, a few per worker, so a slow session holds up little.
    count = max(1, min(len(session_ids), 4 * options.workers))
    size = -(-len(session_ids) // count) if session_ids else 1
    chunks = [session_ids[i : i + size] for i in range(0, len(session_ids), size)]
    # The rebuild's pools: workers die with this process, however it dies (run/lifetime.py).
    with new_pool(options.workers, worker_context(), _start_worker, (paths, options, search_from)) as pool:
        for dumps in pool.map(_dump_chunk, chunks):
            yield from dumps


def _write(path: Path, text: str) -> None:
    try:
        with atomic_path(path) as tmp:
            # Bytes, so no platform newline translation: dumps are identical everywhere.
            tmp.write_bytes(text.encode("utf-8"))
    except OSError as exc:
        raise OutputError(f"cannot write ({exc.strerror or exc})", file=path) from None


def _read(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OutputError(f"cannot read the golden dump ({exc.strerror or exc})", file=path) from None
    # Bytes that are not UTF-8 show as U+FFFD: the golden then differs, and --update repairs it.
    text = data.decode("utf-8", errors="replace")
    # A checkout with autocrlf turns \n into \r\n; that is not a change of the samples.
    return text.replace("\r\n", "\n")


def _make_dir(directory: Path) -> None:
    if directory.exists() and not directory.is_dir():
        raise OutputError("exists and is not a folder", file=directory)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the folder ({exc.strerror or exc})", file=directory) from None


def write_dumps(
    inputs: Inputs,
    out_dir: str | os.PathLike[str],
    options: GoldenOptions | None = None,
    only: Sequence[str] | None = None,
    *,
    update: bool = False,
) -> DumpSummary:
    """Write ``<out_dir>/<session>.txt`` for each session; files other than ``*.txt`` are left alone.

    Into a folder that already holds dumps, nothing is written unless
    ``update`` (as :func:`check_goldens`, goldens never change implicitly): a
    run that would change, add or leave stale a dump raises.  With ``update``,
    changed dumps are rewritten and, when every session is dumped, stale ones
    removed.
    """
    out = Path(out_dir)
    existing = _existing_dumps(out)
    dumps = iter_dumps(inputs, options, only)
    summary = DumpSummary(out)
    if existing and not update:
        # Allowed only if it would change nothing: compare, and stop at the first difference.
        for dump in dumps:
            path = out / dump.file_name
            if not path.is_file() or _read(path) != dump.text:
                _refuse(out, f"{dump.session_id} {'changed' if path.is_file() else 'new'}")
            summary.unchanged.append(path)
        names = {p.name for p in summary.unchanged}
        stale = [p for p in existing if p.name not in names] if only is None else []
        if stale:
            _refuse(out, f"{stale[0].name} stale")
        return summary
    _make_dir(out)
    for dump in dumps:
        path = out / dump.file_name
        if path.is_file() and _read(path) == dump.text:
            summary.unchanged.append(path)
            continue
        _write(path, dump.text)
        summary.written.append(path)
    if update and only is None:
        kept = {p.name for p in summary.written + summary.unchanged}
        for path in existing:
            if path.name not in kept:
                _remove(path)
                summary.removed.append(path)
    return summary


def _refuse(folder: Path, first_difference: str) -> NoReturn:
    raise OutputError(
        f"the folder holds golden dumps that this log would change ({first_difference}); nothing written",
        file=folder,
        tip="tito check LOGS --golden FOLDER shows every difference; add --update to accept the rebuilt dumps "
        "(changed ones rewritten, stale ones removed)",
    )


def _existing_dumps(folder: Path) -> list[Path]:
    """The golden dumps in ``folder``: its ``*.txt`` files that start as a dump does, as
    :func:`check_goldens` counts them (a README.txt or notes are not tito's to judge or remove)."""
    if not folder.is_dir():
        return []
    found = []
    for path in sorted(folder.glob("*.txt"), key=lambda p: p.name):
        if path.name.startswith(".") or not path.is_file():
            continue
        try:
            with path.open(encoding="utf-8", errors="replace") as f:
                if f.read(len(DUMP_HEADER)) == DUMP_HEADER:
                    found.append(path)
        except OSError:
            continue
    return found


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise OutputError(f"cannot remove ({exc.strerror or exc})", file=path) from None


# -- checking -------------------------------------------------------------------


def _golden_session_id(path: Path) -> str:
    """The session a stale dump was written for (its ``session:`` line), else the file stem."""
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            for _, line in zip(range(3), f, strict=False):
                if line.startswith("session: "):
                    return line[len("session: ") :].rstrip("\n")
    except OSError:
        pass
    return path.stem


def check_goldens(
    inputs: Inputs,
    golden_dir: str | os.PathLike[str],
    options: GoldenOptions | None = None,
    only: Sequence[str] | None = None,
    *,
    update: bool = False,
) -> CheckReport:
    """Compare each session's dump with ``<golden_dir>/<session>.txt``.

    With ``update``, changed and new dumps are written and stale ones removed;
    without it nothing is written, whatever the environment.  Stale dumps are
    only looked for when every session is checked (``only`` is None).
    """
    golden = Path(golden_dir)
    if golden.exists() and not golden.is_dir():
        raise OutputError("the golden path is not a folder", file=golden)
    checks: list[SessionCheck] = []
    expected: set[str] = set()
    for dump in iter_dumps(inputs, options, only):
        path = golden / dump.file_name
        expected.add(dump.file_name)
        if not path.is_file():
            checks.append(SessionCheck(dump.session_id, Status.NEW, path, None, dump.text))
            continue
        stored = _read(path)
        status = Status.PASSED if stored == dump.text else Status.CHANGED
        checks.append(SessionCheck(dump.session_id, status, path, stored, dump.text))

    stale_checked = only is None
    if stale_checked and golden.is_dir():
        for path in sorted(golden.glob("*.txt"), key=lambda p: p.name):
            if path.name.startswith(".") or not path.is_file() or path.name in expected:
                continue
            stored = _read(path)
            if not stored.startswith(DUMP_HEADER):
                continue  # not a dump (a README.txt, notes): not tito's to judge or remove
            checks.append(SessionCheck(_golden_session_id(path), Status.STALE, path, stored, None))

    report = CheckReport(golden, checks, stale_checked=stale_checked, golden_existed=golden.is_dir())
    if update and report.failures:
        _make_dir(golden)
        for check in report.failures:
            if check.status is Status.STALE:
                _remove(check.file)
            else:
                assert check.rebuilt is not None
                _write(check.file, check.rebuilt)
    report.updated = update
    return report


# -- diffs ----------------------------------------------------------------------


def unified_diff(golden: str, rebuilt: str, golden_name: str, rebuilt_name: str, context: int = 3) -> list[DiffLine]:
    """A unified diff that also says how many unchanged lines each gap hides."""
    # split("\n"), not splitlines(): a stray \r or \x0c in an edited golden is a difference to show.
    a = golden.removesuffix("\n").split("\n")
    b = rebuilt.removesuffix("\n").split("\n")
    lines = [DiffLine("header", f"--- golden  {golden_name}"), DiffLine("header", f"+++ rebuilt {rebuilt_name}")]
    # autojunk off: dumps repeat lines (e.g. span labels) that must not be treated as noise.
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    shown_to = 0  # index in ``a`` after the last line shown
    for group in matcher.get_grouped_opcodes(context):
        a_start, b_start = group[0][1], group[0][3]
        a_end, b_end = group[-1][2], group[-1][4]
        if a_start > shown_to:
            lines.append(DiffLine("…", f"⋯ {a_start - shown_to} unchanged lines ⋯"))
        lines.append(DiffLine("@", f"@@ -{_range(a_start, a_end)} +{_range(b_start, b_end)} @@"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(DiffLine(" ", line) for line in a[i1:i2])
                continue
            if tag in ("replace", "delete"):
                lines.extend(DiffLine("-", shown(line)) for line in a[i1:i2])
            if tag in ("replace", "insert"):
                lines.extend(DiffLine("+", shown(line)) for line in b[j1:j2])
        shown_to = a_end
    if len(lines) > 2 and shown_to < len(a):
        lines.append(DiffLine("…", f"⋯ {len(a) - shown_to} unchanged lines ⋯"))
    return lines


def shown(line: str) -> str:
    """A changed line with what a terminal would hide made visible: trailing blanks, control characters.

    Dumps never contain either, but an edited or re-encoded golden can, and
    ``-foo `` / ``+foo`` must not look like two identical lines.
    """
    body = line.rstrip(" ")
    trail = "␣" * (len(line) - len(body))
    return escape_invisible(body) + trail


def _range(start: int, end: int) -> str:
    # Unified-diff convention: 1-based first line, and the count; an empty range names the line before.
    count = end - start
    first = start + 1 if count else start
    return f"{first},{count}"
