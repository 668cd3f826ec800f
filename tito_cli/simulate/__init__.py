"""A session simulator: realistic turn logs made offline, with a real tokenizer and chat template.

    summary = simulate("logs/", sessions=24, seed=0, profile="demo")

A coding agent (``agent.py``) works bug-fixing tasks in a scripted repository
(``environment.py``); a simulated model (``model.py``) writes its replies out
as token ids with logprobs; a harness (``session.py``) renders every prompt
with the chat template (``chat.py``), records each turn and each finished
session through :class:`~tito_cli.capture.writer.TurnLogWriter`, and does what real
harnesses do to conversations: sub-agents, compaction, retries, rewinds,
re-rendered history.  Profiles (``profiles.py``) set the session size and
how often each of those behaviours occurs.

The output depends only on the arguments (and the library versions): no
wall clock, no hash order.  Running it twice gives byte-identical files.
"""

from __future__ import annotations

import os
import random
import shutil
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from .._paths import FIXTURE_TOKENIZER
from .._targets import check_target, log_files_in, publish_folder, staging_folder, writing
from ..capture.writer import TurnLogWriter
from ..errors import OutputError
from ..families import family_named
from ..tokenizer import resolve
from .chat import Chat
from .environment import Workspace
from .profiles import FEATURES, PROFILES, Features, Profile, assign_features
from .provenance import ProvenanceWriter
from .session import SessionStats, play_session

__all__ = [
    "DEFAULT_TOKENIZER",
    "FEATURES",
    "PROFILES",
    "Features",
    "SessionStats",
    "SimulationSummary",
    "simulate",
    "simulate_session",
]

#: The tokenizer of the ``demo`` and ``swe`` profiles, as recorded in their logs (shipped with tito).
DEFAULT_TOKENIZER = FIXTURE_TOKENIZER
_EPOCH = datetime(2026, 6, 1, 9, 0, tzinfo=timezone.utc)


@dataclass(slots=True)
class SimulationSummary:
    out_dir: Path
    profile: str
    seed: int
    tokenizer: str
    sessions: list[SessionStats] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    @property
    def turns(self) -> int:
        return sum(s.turns for s in self.sessions)

    @property
    def prompt_tokens(self) -> int:
        return sum(s.prompt_tokens for s in self.sessions)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.sessions)

    @property
    def max_prompt_tokens(self) -> int:
        return max((s.max_prompt_tokens for s in self.sessions), default=0)

    @property
    def events(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for s in self.sessions:
            total.update(s.events)
        return total


def simulate(
    out_dir: str | os.PathLike[str],
    sessions: int,
    seed: int,
    profile: str = "demo",
    *,
    tokenizer: str | None = None,
    tokenizer_dir: str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    progress: Callable[[int, int], None] | None = None,
    provenance: bool = False,
) -> SimulationSummary:
    """Simulate ``sessions`` sessions into a turn log in ``out_dir``.

    ``tokenizer`` (default: the profile's) is recorded in the files as
    ``tito.tokenizer`` and found by :func:`tito_cli.tokenizer.resolve`, or
    loaded from ``tokenizer_dir`` when that is given.  A folder
    that already holds Parquet files is refused unless ``overwrite``, which
    replaces those files once the new log is complete (a failed run leaves
    them as they were).  ``progress(done, total)`` is called after each
    session.  ``provenance``: the simulated server also reports weight versions and
    routed experts (a function of the prefix, :mod:`.provenance`), recorded with each turn.
    """
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; choose from {', '.join(PROFILES)}")
    if sessions < 0:
        raise ValueError("sessions must be >= 0")
    spec: Profile = PROFILES[profile]
    out = Path(out_dir)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
    check_target(out, overwrite=overwrite, folder=True)
    existing = log_files_in(out) if out.is_dir() else []
    if existing and not overwrite:
        raise OutputError(
            f"{out} already holds {len(existing)} Parquet file(s); simulated sessions would mix with them",
            file=out,
            tip="choose an empty folder, or pass --overwrite to delete those files first",
        )

    tokenizer = tokenizer or spec.tokenizer
    folder = Path(tokenizer_dir) if tokenizer_dir is not None else resolve(tokenizer)
    chat = Chat(folder, family_named(spec.family))
    # The new log is written aside (a hidden folder beside the target, so on the same file
    # system) and moved in only once it is complete: a failed run leaves the old log as it was.
    staging = staging_folder(out)
    try:
        with writing(out):
            summary = _simulate_into(staging, chat, spec, sessions, seed, profile, tokenizer, progress, provenance)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    publish_folder(staging, out, existing)
    summary.out_dir = out
    summary.files = [out / f.name for f in summary.files]
    return summary


def _simulate_into(
    out: Path,
    chat: Chat,
    spec: Profile,
    sessions: int,
    seed: int,
    profile: str,
    tokenizer: str,
    progress: Callable[[int, int], None] | None,
    provenance: bool = False,
) -> SimulationSummary:
    summary = SimulationSummary(out, profile, seed, tokenizer)
    features = assign_features(spec, sessions, random.Random(f"tito-simulate:{profile}:{seed}:features"))
    kind = ProvenanceWriter if provenance else TurnLogWriter
    with kind(out, tokenizer=tokenizer, max_age=None, name=f"{profile}-{seed}") as writer:
        for index in range(sessions):
            # Sessions of a group share the repository; it has a long module if one of them rewrites it.
            group = index // spec.group_size
            members = features[group * spec.group_size : (group + 1) * spec.group_size]
            long_target = any("long_write" in f for f in members)
            stats = simulate_session(
                chat, writer, profile=spec, seed=seed, index=index, features=features[index], long_target=long_target
            )
            summary.sessions.append(stats)
            chat.forget()
            if progress is not None:
                progress(index + 1, sessions)
    summary.files = list(writer.files_written)
    return summary


def simulate_session(
    chat: Chat,
    writer: TurnLogWriter,
    *,
    profile: Profile,
    seed: int,
    index: int,
    features: Features,
    long_target: bool = False,
) -> SessionStats:
    """Simulate session ``index`` of a run with ``seed``, with the given features, into ``writer``.

    Sessions of one group (``index // profile.group_size``) work on the same
    repository; ``long_target`` gives it a long module to rewrite.
    """
    group = index // profile.group_size
    repo_rng = random.Random(f"tito-simulate:{profile.name}:{seed}:repo:{group}")
    workspace = Workspace.generate(
        repo_rng,
        modules=repo_rng.randint(*profile.modules),
        functions=profile.functions,
        body_lines=profile.body_lines,
        bugs=repo_rng.randint(*profile.bugs),
        long_target=long_target,
    )
    return play_session(
        chat,
        writer,
        session_id=f"{profile.name}-{seed}-{index:04d}",
        index=index,
        profile=profile,
        features=features,
        workspace=workspace,
        rng=random.Random(f"tito-simulate:{profile.name}:{seed}:session:{index}"),
        start=_EPOCH + timedelta(minutes=7 * index),
    )
