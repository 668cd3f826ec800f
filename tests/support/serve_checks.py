"""What a gateway's log must hold, checked against the inference stand-in's ledger and tito's own commands.

* :func:`turns_by_session`: the log read back through tito's reader (format-2 deltas rebuilt), every row.
* :func:`assert_turns_are_the_ledger`: every recorded turn's prompt ids are ids the upstream received and
  its output ids and logprobs are what the upstream generated for them, one ledger entry per turn.
* :func:`assert_turns_are_the_ledger_in_order`: the same for one session's turns, in the order the upstream
  answered them.
* :func:`assert_rebuild_trains_each_output_once`: ``tito rebuild`` trains each generated output, with its
  logprobs, exactly once.
* :func:`assert_rebuild_trains_the_generated_tokens`: ``tito rebuild`` of the log trains exactly the
  output ids of the turns each sample packs (``tito inspect --json`` names them).
* :func:`assert_view_shows`: ``tito view`` writes a page holding the sessions and their samples.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from tests.support.cli import tito as tito_in_process
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild
from tito_cli.turns import Turn


def raw_seqs_by_session(log: Path) -> dict[str, list[int | None]]:
    """Every turns row's ``seq``, per session, in the order the reader hands rows out (duplicates kept)."""
    return {rows.session_id: [raw.seq for raw in rows.rows] for rows in TurnLog.open([log]).iter_sessions()}


def turns_by_session(log: Path) -> dict[str, list[Turn]]:
    """The log's turns, validated, per session in ``seq`` order."""
    return {rows.session_id: parse_session(rows) for rows in TurnLog.open([log]).iter_sessions()}


def _key(prompt: Iterable[int], output: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(int(i) for i in prompt), tuple(int(i) for i in output)


def _assert_turn_is_the_entry(turn: Turn, entry: dict[str, Any]) -> None:
    """The turn's logprobs are what the upstream generated (its prompt and output ids already matched)."""
    assert turn.output_logprobs is not None, f"seq {turn.seq}: no logprobs recorded"
    # The turns column is float32: the stand-in's values are compared at that precision.
    assert turn.output_logprobs.tolist() == np.asarray(entry["logprobs"], np.float32).tolist(), f"seq {turn.seq}"


def assert_turns_are_the_ledger(turns: Sequence[Turn], ledger: Sequence[dict[str, Any]]) -> None:
    """One ledger entry per turn: same prompt ids received, same output ids and logprobs generated."""
    recorded = Counter(_key(t.prompt_ids, t.output_ids) for t in turns)
    served = Counter(_key(e["prompt_ids"], e["output_ids"]) for e in ledger)
    assert len(turns) == len(ledger), f"{len(turns)} turns recorded, the upstream answered {len(ledger)}"
    assert recorded == served, "recorded (prompt ids, output ids) pairs differ from what the upstream saw"
    by_key = {_key(e["prompt_ids"], e["output_ids"]): e for e in ledger}
    for t in turns:
        _assert_turn_is_the_entry(t, by_key[_key(t.prompt_ids, t.output_ids)])


def assert_turns_are_the_ledger_in_order(
    turns: Sequence[Turn], entries: Sequence[dict[str, Any]], api: str
) -> None:
    """One session's turns are the stand-in's ``api`` answers, one each, in the order it answered them."""
    assert len(turns) == len(entries), f"{len(turns)} turns recorded, the upstream answered {len(entries)}"
    for turn, entry in zip(turns, entries, strict=True):
        assert entry["api"] == api
        assert _key(turn.prompt_ids, turn.output_ids) == _key(entry["prompt_ids"], entry["output_ids"]), (
            f"seq {turn.seq}: the recorded ids are not what the upstream saw and generated"
        )
        _assert_turn_is_the_entry(turn, entry)


def trained_runs(samples: Path, session_id: str) -> Counter[tuple[tuple[int, ...], tuple[float, ...]]]:
    """Each maximal run of trained tokens (loss mask 1) of the session's samples, with its logprobs."""
    runs: Counter[tuple[tuple[int, ...], tuple[float, ...]]] = Counter()
    for row in pq.read_table(samples).to_pylist():
        if row["session_id"] != session_id:
            continue
        response = row["tokens"][len(row["tokens"]) - row["response_length"] :]
        mask, logprobs = row["loss_mask"], row["rollout_log_probs"]
        i = 0
        while i < len(mask):
            if mask[i]:
                j = i
                while j < len(mask) and mask[j]:
                    j += 1
                runs[(tuple(response[i:j]), tuple(logprobs[i:j]))] += 1
                i = j
            else:
                i += 1
    return runs


def assert_rebuild_trains_each_output_once(
    logs: Path, out: Path, session_id: str, entries: Sequence[dict[str, Any]]
) -> None:
    """``tito rebuild``: the session's trained runs are exactly the generated outputs with their logprobs, each once."""
    rebuild([logs], out, overwrite=True, workers=1)
    generated = Counter((tuple(e["output_ids"]), tuple(np.float32(x).item() for x in e["logprobs"])) for e in entries)
    assert trained_runs(out, session_id) == generated


@dataclass(frozen=True)
class Done:
    returncode: int
    stdout: str
    stderr: str


def tito(*args: str) -> Done:
    """A ``tito`` command, run in this process (typer's runner: the real command line, without a new interpreter)."""
    result = tito_in_process(*args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Done(result.exit_code, result.stdout, result.stderr)


def assert_rebuild_trains_the_generated_tokens(log: Path, out: Path, turns: dict[str, list[Turn]]) -> int:
    """``tito rebuild``: each sample's trained tokens are the output ids of the turns it trains, in order.

    Returns the number of samples checked.
    """
    done = tito("rebuild", str(log), "--out", str(out))
    assert done.returncode == 0, done.stderr
    rows = pq.read_table(out).to_pylist()
    assert sorted({r["session_id"] for r in rows}) == sorted(turns)
    for sid, session_turns in turns.items():
        facts = tito("inspect", sid, str(log), "--json")
        assert facts.returncode == 0, facts.stderr
        samples = json.loads(facts.stdout)["samples"]
        outputs = {t.seq: t.output_ids.tolist() for t in session_turns}
        mine = sorted((r for r in rows if r["session_id"] == sid), key=lambda r: r["sample_index"])
        assert len(mine) == len(samples), sid
        every_trained: list[int] = []
        for row, sample in zip(mine, samples, strict=True):
            response = row["tokens"][len(row["tokens"]) - row["response_length"]:]
            trained = [token for token, mask in zip(response, row["loss_mask"], strict=True) if mask == 1]
            expected = [i for seq in sample["trained_turns"] for i in outputs[seq]]
            assert trained == expected, f"{sid} sample {row['sample_index']}: trained tokens are not the outputs"
            every_trained += sample["trained_turns"]
        # Every generated turn is trained somewhere (nothing the model generated is lost to the trainer).
        assert sorted(set(every_trained)) == sorted(outputs), sid
    return len(rows)


def page_data(page: str) -> dict[str, Any]:
    found = re.search(r'<script type="application/json" id="tito-data">(.*?)</script>', page, re.S)
    assert found is not None, "the page has no inline data"
    data: dict[str, Any] = json.loads(found.group(1))
    return data


def assert_view_shows(log: Path, out: Path, samples: Path) -> None:
    """``tito view --all``: the page holds every session of the log with the samples file's tokens."""
    done = tito("view", "--all", "--logs", str(log), "--out", str(out))
    assert done.returncode == 0, done.stderr
    data = page_data(out.read_text(encoding="utf-8"))
    rows = {(r["session_id"], r["sample_index"]): r for r in pq.read_table(samples).to_pylist()}
    assert sorted(data["sessions"]) == sorted({sid for sid, _ in rows})
    shown = 0
    for sid, session in data["sessions"].items():
        for sample in session["samples"]:
            assert sample["ids"] == rows[(sid, sample["index"])]["tokens"]
            shown += 1
    assert shown == len(rows)


def session_turns(logs: Path, session_id: str, expected: int, timeout: float = 20.0) -> list[Turn]:
    """The session's turns once the log holds ``expected`` of them (the writer flushes on a timer)."""
    deadline = time.monotonic() + timeout
    turns: list[Turn] = []
    while time.monotonic() < deadline:
        if list(logs.glob("*.parquet")):
            log = TurnLog.open([logs])
            turns = [t for rows in log.iter_sessions({session_id}) for t in parse_session(rows)]
            if len(turns) >= expected:
                return turns
        time.sleep(0.1)
    raise AssertionError(f"session {session_id}: {len(turns)} turns in the log, expected {expected}")
