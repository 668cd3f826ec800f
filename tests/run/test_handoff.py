"""The worker handoff folder: a sweep never takes a live rebuild's folder for a dead one's.

Every rebuild with workers sweeps ``$TMPDIR`` of dead rebuilds' handoff
folders (``run/lifetime.py``), so any rebuild may sweep while another is
creating, using or removing its own.  A live folder removed under its
workers is issue #23's ``FileNotFoundError … tito-handoff-…/batch-*.arrow``:
these tests put a sweep at each of those moments.
"""

from __future__ import annotations

import errno
import fcntl
import multiprocessing
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Iterable, Iterator
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.helpers import write_log
from tito_cli.errors import OutputError
from tito_cli.run import handoff, pool
from tito_cli.run.lifetime import HANDOFF_PREFIX, handoff_folder, sweep_handoff_folders
from tito_cli.run.rebuild import rebuild


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``$TMPDIR`` of the test's own (other rebuilds on the machine sweep the real one)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def _dead_folder(parent: Path, lock_text: str) -> Path:
    """A handoff folder as a killed rebuild leaves it: a ``.lock`` nobody holds, and a handoff file."""
    folder = Path(tempfile.mkdtemp(prefix=HANDOFF_PREFIX, dir=parent))
    (folder / ".lock").write_text(lock_text)
    (folder / "batch-x.arrow").write_bytes(b"rows")
    return folder


def test_a_sweep_in_the_instant_a_new_folder_is_locked_leaves_it(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another rebuild's sweep runs between the folder's creation and its lock (where the lock
    # file was once created under its own name, free for that instant).
    real_flock = fcntl.flock
    sweeps: list[list[Path]] = []

    def flock_after_a_sweep(fd: int, operation: int) -> None:
        if not sweeps:
            sweeps.append([])
            sweeps[0] = sweep_handoff_folders(scratch)
        real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock_after_a_sweep)
    with handoff_folder() as folder:
        assert sweeps == [[]]
        assert Path(folder).is_dir()
        # What a worker then does with it.
        fd, _ = tempfile.mkstemp(prefix="batch-", suffix=".arrow", dir=folder)
        os.close(fd)
        assert sweep_handoff_folders(scratch) == []
    assert list(scratch.iterdir()) == []


def test_a_folder_is_gone_before_its_lock_is_let_go(scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A sweep that runs while a rebuild removes its own folder finds the lock held.
    real_rmtree = shutil.rmtree
    during_removal: list[list[Path]] = []

    def rmtree_after_a_sweep(path: Any, *args: Any, **kwargs: Any) -> None:
        if Path(path).parent == scratch and not during_removal:
            during_removal.append([])
            during_removal[0] = sweep_handoff_folders(scratch)
        real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", rmtree_after_a_sweep)
    with handoff_folder():
        pass
    assert during_removal == [[]]
    assert list(scratch.iterdir()) == []


def test_where_flock_fails_a_folder_gets_no_lock_file_and_no_sweep_removes_it(
    scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_flock = fcntl.flock

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "no locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with handoff_folder() as folder:
        # Nothing that looks like a dead run's folder: no .lock (the claim under another name is gone too).
        assert sorted(os.listdir(folder)) == []
        # A sweep from a rebuild where locks do work (another mount, another process).
        monkeypatch.setattr(fcntl, "flock", real_flock)
        assert sweep_handoff_folders(scratch) == []
        assert Path(folder).is_dir()
        monkeypatch.setattr(fcntl, "flock", no_locks)
    assert list(scratch.iterdir()) == []


def test_dead_folders_are_swept_unless_their_lock_names_another_machine(scratch: Path) -> None:
    here = socket.gethostname()
    boot_id = Path("/proc/sys/kernel/random/boot_id")
    boot = boot_id.read_text().strip() if boot_id.exists() else ""
    this_boot = _dead_folder(scratch, f"{here}\n{boot}\n")
    # This machine before a reboot: whoever held that lock is gone.
    earlier_boot = _dead_folder(scratch, f"{here}\nearlier-boot\n")
    # Written by a tito that put no name in its lock file.
    unnamed = _dead_folder(scratch, "")
    # Another machine sharing this TMPDIR: its lock may be held out of our sight.
    elsewhere = _dead_folder(scratch, "other-host\nother-boot\n")

    swept = sweep_handoff_folders(scratch)

    assert sorted(swept) == sorted([this_boot, earlier_boot, unnamed])
    assert [p.name for p in scratch.iterdir()] == [elsewhere.name]



def test_a_sweep_passes_over_what_tito_did_not_make(scratch: Path, tmp_path: Path) -> None:
    # $TMPDIR is shared: anyone can name things tito-handoff-*.
    fifo = Path(tempfile.mkdtemp(prefix=HANDOFF_PREFIX, dir=scratch))
    os.mkfifo(fifo / ".lock")  # opening it to read would wait for a writer
    elsewhere = tmp_path / "not-in-tmp"
    (elsewhere / "kept").mkdir(parents=True)
    (elsewhere / ".lock").write_text("")
    (scratch / f"{HANDOFF_PREFIX}link").symlink_to(elsewhere)
    (scratch / f"{HANDOFF_PREFIX}file").write_text("")
    swept: list[list[Path]] = []
    sweep = threading.Thread(target=lambda: swept.append(sweep_handoff_folders(scratch)), daemon=True)
    sweep.start()
    sweep.join(30)
    assert not sweep.is_alive(), "the sweep hangs on a FIFO named .lock"
    assert swept == [[]]
    assert (elsewhere / "kept").is_dir()
    assert len(list(scratch.iterdir())) == 3


@pytest.mark.skipif(
    pool.worker_context().get_start_method() != "fork", reason="the patched handoff reaches forked workers only"
)
def test_a_rebuild_whose_every_handoff_write_follows_a_sweep_writes_the_same_bytes(
    tmp_path: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if another rebuild started at every moment a worker creates a handoff file.
    rng = np.random.default_rng(3)
    turns = [
        {
            "session_id": f"s{s:03d}",
            "seq": seq,
            "prompt_ids": [1, 2, 3, *([9] * seq * 3)],
            "output_ids": [int(t) for t in rng.integers(10, 99, size=3)],
            "prompt_messages": [{"role": "user", "content": f"task {s}"}],
        }
        for s in range(40)
        for seq in range(2)
    ]
    logs = tmp_path / "logs"
    write_log(logs, turns, [{"session_id": f"s{s:03d}", "reward": 1.0} for s in range(40)], max_rows=8)
    dead = _dead_folder(scratch, "")
    real_write = handoff.Handoff.write

    def write_after_a_sweep(outputs: Iterable[Any], folder: str) -> list[Any]:
        # In the worker: an error here fails the rebuild, as issue #23's did.
        if Path(folder) in sweep_handoff_folders(scratch):
            raise AssertionError(f"a sweep removed the live handoff folder {folder}")
        return real_write(outputs, folder)

    monkeypatch.setattr(handoff.Handoff, "write", staticmethod(write_after_a_sweep))
    one = rebuild([logs], tmp_path / "one.parquet", workers=1)
    two = rebuild([logs], tmp_path / "two.parquet", workers=2, batch_bytes=0)

    assert two.sessions == one.sessions == 40
    assert (tmp_path / "two.parquet").read_bytes() == (tmp_path / "one.parquet").read_bytes()
    assert not dead.exists()
    assert list(scratch.iterdir()) == []


@pytest.mark.skipif(
    pool.worker_context().get_start_method() != "fork", reason="the patched handoff reaches forked workers only"
)
def test_a_rebuild_whose_handoff_folder_something_else_removes_fails_saying_so(
    tmp_path: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = tmp_path / "logs"
    turns = [
        {"session_id": f"s{s}", "seq": 0, "prompt_ids": [1, 2], "output_ids": [3], "prompt_messages": []}
        for s in range(6)
    ]
    write_log(logs, turns, max_rows=2)
    real_write = handoff.Handoff.write

    def write_after_a_tmp_cleaner(outputs: Iterable[Any], folder: str) -> list[Any]:
        # In a worker: what `rm -rf /tmp/*` does to a running rebuild (both workers may try: the second finds it gone).
        shutil.rmtree(folder, ignore_errors=True)
        return real_write(outputs, folder)

    monkeypatch.setattr(handoff.Handoff, "write", staticmethod(write_after_a_tmp_cleaner))
    out = tmp_path / "out.parquet"
    out.write_bytes(b"the previous samples")
    with pytest.raises(OutputError) as caught:
        rebuild([logs], out, workers=2, batch_bytes=0, overwrite=True)
    assert "handoff folder was removed while the rebuild ran, and not by tito" in str(caught.value)
    assert out.read_bytes() == b"the previous samples"


def test_a_handoff_folder_removed_by_something_else_is_named_in_the_error(scratch: Path) -> None:
    gone = scratch / f"{HANDOFF_PREFIX}gone"
    with pytest.raises(FileNotFoundError) as caught:
        handoff.Handoff.write([], str(gone))
    assert caught.value.filename == str(gone)
    assert "removed while the rebuild ran, and not by tito" in str(caught.value)
    assert f"something cleaning {scratch}?" in str(caught.value)


def _sweep_until(stop: Event, parent: str, ready: Any) -> None:
    sweep_handoff_folders(parent)
    ready.put(os.getpid())
    while not stop.is_set():
        sweep_handoff_folders(parent)


@pytest.mark.slow
def test_live_folders_survive_sweeps_running_alongside_them(scratch: Path) -> None:
    # No injection: two processes sweep without pause while folders come and go. With the
    # .lock created free and locked next, about 3% of these folders were removed under their owner:
    # some 30 of 1,000 (the chance that none of them is, about e**-30).
    context = multiprocessing.get_context("spawn")
    stop, ready = context.Event(), context.Queue()
    sweepers = [context.Process(target=_sweep_until, args=(stop, str(scratch), ready)) for _ in range(2)]
    for sweeper in sweepers:
        sweeper.start()
    lost = []
    try:
        for _ in sweepers:
            ready.get(timeout=120)
        for _ in range(1000):
            with handoff_folder() as folder:
                try:
                    fd, _ = tempfile.mkstemp(prefix="batch-", suffix=".arrow", dir=folder)
                except FileNotFoundError:
                    lost.append(folder)
                else:
                    os.close(fd)
    finally:
        stop.set()
        for sweeper in sweepers:
            sweeper.join(60)
    assert [s.exitcode for s in sweepers] == [0, 0]
    assert lost == []
    assert list(scratch.iterdir()) == []


def _outputs_of_a_log(tmp_path: Path, sessions: int) -> Iterator[Any]:
    """The real outputs of a small log's sessions, one at a time, as a worker makes them."""
    from tito_cli.algorithm.policy import default_policy
    from tito_cli.run.corpus import Corpus

    turns = [
        {
            "session_id": f"s{s:02d}",
            "seq": seq,
            "prompt_ids": [1, 2, 3, *([9 + s] * seq * 4)],
            "output_ids": [10 + s, 11, 12, 13],
            "prompt_messages": [{"role": "user", "content": f"task {s}"}],
        }
        for s in range(sessions)
        for seq in range(3)
    ]
    logs = tmp_path / "logs"
    write_log(logs, turns, [{"session_id": f"s{s:02d}", "reward": 1.0} for s in range(sessions)], max_rows=4)
    corpus = Corpus.open([logs])
    table = corpus.sessions_table
    batch = corpus.log.index().batches(float("inf"))[0]
    task = pool.BatchTask(corpus.log.turn_files, batch, table.infos, table.invalid, default_policy())
    return pool.iter_batch(task)


def test_a_worker_writes_each_sessions_rows_before_it_rebuilds_the_next(tmp_path: Path, scratch: Path) -> None:
    # What a worker holds must not grow with its batch: a session's rows leave it as soon as it is rebuilt.
    made: list[Any] = []
    tables: list[Any] = []

    def watched() -> Iterator[Any]:
        for output in _outputs_of_a_log(tmp_path, 5):
            if made:
                assert made[-1].table is None and made[-1].handoff is not None, "the previous rows are still held"
            tables.append(output.table)
            made.append(output)
            yield output

    folder = tempfile.mkdtemp(dir=scratch)
    outputs = handoff.Handoff.write(watched(), folder)
    assert len(outputs) == 5 and all(o.table is None for o in outputs)
    # The writer reads them back one at a time, when each is handed on: the next is not read yet, and
    # the batch's list lets go of each output it hands on (it held every table read until the batch's end).
    held = list(outputs)
    back = []
    for k, output in enumerate(handoff.Handoff.read(outputs)):
        assert k + 1 == len(held) or held[k + 1].table is None
        assert len(outputs) == len(held) - k - 1 and output not in outputs
        back.append(output.table)
    assert [t.equals(u) for t, u in zip(back, tables, strict=True)] == [True] * 5
    assert list(Path(folder).iterdir()) == []  # unlinked once opened
