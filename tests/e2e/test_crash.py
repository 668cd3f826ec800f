"""Crash safety with real processes killed by SIGKILL (no cleanup code runs).

* ``tito rebuild`` killed anywhere leaves ``--out`` either as it was or as the
  complete new output, never half of one; the next rebuild removes the dead
  run's temporaries.
* A capture writer killed while many threads record leaves only readable
  files, and every turn recorded before its last completed flush is in them.

Kill times are random but seeded, and every run is bounded by a timeout.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.processes import ENV, TIMEOUT, alive, children, wait_for, write_workload
from tito_cli._atomic import atomic_path, remove_stale_temporaries
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.read.turnlog import TurnLog
from tito_cli.read.validate import parse_session
from tito_cli.run.rebuild import rebuild

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")


def tito(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tito_cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )


def test_stale_temporaries_are_told_from_live_ones(tmp_path: Path) -> None:
    target = tmp_path / "samples.parquet"
    dead = tmp_path / ".samples.parquet.0123456789ab.tmp"
    dead.write_bytes(b"half a file")
    unrelated = tmp_path / ".samples.parquet.backup.tmp"
    unrelated.write_bytes(b"not ours")
    with atomic_path(target) as live:
        live.write_bytes(b"being written")
        # The live writer holds its lock (a separate open file description, as another process would be).
        assert remove_stale_temporaries(target) == [dead]
        assert live.exists() and not dead.exists() and unrelated.exists()
    assert target.read_bytes() == b"being written"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".samples.parquet.backup.tmp", "samples.parquet"]


def test_rebuild_killed_anywhere_leaves_old_or_new_output(tmp_path: Path) -> None:
    log = tmp_path / "logs"
    write_workload(log, copies=2)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "samples.parquet"
    rejects = out_dir / "samples.parquet.rejects.jsonl"

    # The previous output (another policy, so other bytes), and the complete new one for reference.
    rebuild([log], out, SlimeV4(fork_threshold=0))
    old = out.read_bytes(), rejects.read_bytes()
    reference = tmp_path / "reference.parquet"
    started = time.monotonic()
    assert tito("rebuild", str(log), "--out", str(reference)).wait(TIMEOUT) == 0
    duration = time.monotonic() - started
    new = reference.read_bytes(), (tmp_path / "reference.parquet.rejects.jsonl").read_bytes()
    assert new[0] != old[0]

    outcomes = set()
    # From interpreter start-up to the final renames, as fractions of a whole run.  Each kill starts
    # from the old output again, so an early kill (the first lands in start-up however loaded the
    # machine is) must leave the old file and a late one either file, never a part of one.
    for fraction in (0.05, 0.35, 0.7, 1.0):
        out.write_bytes(old[0])
        rejects.write_bytes(old[1])
        proc = tito("rebuild", str(log), "--out", str(out), "--overwrite")
        time.sleep(fraction * duration)
        proc.send_signal(signal.SIGKILL)
        proc.wait(TIMEOUT)
        state = out.read_bytes(), rejects.read_bytes()
        assert state[0] in (old[0], new[0]), "the samples file must be the old one or the whole new one"
        assert state[1] in (old[1], new[1])
        outcomes.add("new" if state[0] == new[0] else "old")
        # Beside them, at most the dead run's hidden temporaries, which no log reader picks up.
        for p in out_dir.iterdir():
            assert p in (out, rejects) or (p.name.startswith(".samples.parquet.") and p.name.endswith(".tmp")), p

    # The next run finishes the job and sweeps the dead runs' temporaries.
    assert tito("rebuild", str(log), "--out", str(out), "--overwrite").wait(TIMEOUT) == 0
    assert (out.read_bytes(), rejects.read_bytes()) == new
    assert sorted(p.name for p in out_dir.iterdir()) == ["samples.parquet", "samples.parquet.rejects.jsonl"]
    assert "old" in outcomes, "at least one kill should land before the output was replaced"


# The capture-side child: threads record turns with content derived from
# (thread, n); a flusher thread snapshots how many records each thread has
# completed, flushes, and only then prints the snapshot.  Size- and age-based
# flushes happen meanwhile.
CAPTURE_CHILD = r"""
import json, sys, threading
from tito_cli.capture.writer import TurnLogWriter

writer = TurnLogWriter(sys.argv[1], max_rows=64, max_age=0.05, name="crash")
THREADS = 8
done = [0] * THREADS

def record(t):
    n = 0
    while True:
        sid, seq = f"t{t}-s{n // 10}", n % 10
        writer.record_turn(
            sid, [t, n, seq] * 20, [n % 50000] * 5, [-0.5] * 5, "stop",
            [{"role": "user", "content": f"{t}/{n}"}], {"role": "assistant", "content": str(n)},
            seq=seq,
        )
        n += 1
        done[t] = n

for t in range(THREADS):
    threading.Thread(target=record, args=(t,), daemon=True).start()
while True:
    snapshot = list(done)
    writer.flush()
    print(json.dumps(snapshot), flush=True)
"""


def run_capture_until_killed(log: Path, flushes: int, extra: float) -> list[int]:
    """Run the capture child, SIGKILL it after ``flushes`` reported flushes plus ``extra`` seconds."""
    proc = subprocess.Popen([sys.executable, "-c", CAPTURE_CHILD, str(log)], stdout=subprocess.PIPE, env=ENV, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    deadline = time.monotonic() + TIMEOUT
    while len(lines) < flushes and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(extra)
    proc.send_signal(signal.SIGKILL)
    proc.wait(TIMEOUT)
    reader.join(TIMEOUT)
    if proc.stdout is not None:
        proc.stdout.close()
    assert len(lines) >= flushes, "the capture child did not get going"
    # The last line may be cut by the kill; the one before it is complete.
    complete = [line for line in lines if line.endswith("\n")]
    snapshot: list[int] = json.loads(complete[-1])
    return snapshot


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_capture_killed_while_threads_record_keeps_every_flushed_turn(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log = tmp_path / "logs"
    snapshot = run_capture_until_killed(log, flushes=rng.randint(3, 12), extra=rng.uniform(0, 0.2))

    # Every visible file is a complete, readable turns table (the reader's own checks included).
    files = sorted(log.glob("*.parquet"))
    assert files
    turn_log = TurnLog.open([log])
    present: set[tuple[str, int]] = set()
    # Read as a rebuild reads them (format 2 rows rebuilt from their bases, which were flushed with
    # them or before them): a base lost to the kill would reject its session here.
    for rows in turn_log.iter_sessions():
        for turn in parse_session(rows):
            t, n = (int(x) for x in turn.prompt_messages[0]["content"].split("/"))
            sid, seq = f"t{t}-s{n // 10}", n % 10
            key = (rows.session_id, turn.seq)
            assert key == (sid, seq), "row content must match the row it claims to be"
            assert turn.prompt_ids.tolist() == [t, n, seq] * 20 and turn.output_ids.tolist() == [n % 50000] * 5
            assert key not in present, "no turn may be written twice"
            present.add(key)
    assert sum(f.num_rows for f in turn_log.turn_files) == len(present)

    # Everything recorded before the last completed flush began is there.
    for t, count in enumerate(snapshot):
        for n in range(count):
            assert (f"t{t}-s{n // 10}", n % 10) in present, (t, n)
    assert sum(snapshot) > 0


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from /proc")
@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_workers_die_with_a_killed_rebuild_and_its_handoff_folder_is_swept(tmp_path: Path, how: int) -> None:
    log = tmp_path / "logs"
    write_workload(log, copies=6)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**ENV, "TMPDIR": str(scratch)}
    args = [sys.executable, "-m", "tito_cli", "rebuild", str(log), "-j", "2", "--batch-mb", "0.001"]
    proc = subprocess.Popen(
        [*args, "--out", str(tmp_path / "a.parquet")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env
    )
    try:
        assert wait_for(lambda: len(children(proc.pid)) >= 2 and any(scratch.glob("tito-handoff-*")), TIMEOUT)
        workers = children(proc.pid)
        proc.send_signal(how)
        proc.wait(TIMEOUT)
        # Killed before any cleanup could run: the workers must go by themselves.
        assert wait_for(lambda: not any(alive(w) for w in workers), 15), "workers outlived their rebuild"
    finally:
        proc.kill()
        proc.wait(TIMEOUT)
    assert list(scratch.glob("tito-handoff-*")), "the killed run's handoff folder is left (no cleanup ran)"

    # The next rebuild with workers sweeps it (and removes its own on the way out).
    done = subprocess.run([*args, "--out", str(tmp_path / "b.parquet")], capture_output=True, env=env, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert list(scratch.iterdir()) == []
