"""The Ray Data engine: the conformance corpus, rebuilt on a local Ray, gives the local engine's files, byte for byte.

Skipped when Ray is not installed (``pip install 'tito-cli[ray]'``); CI installs it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE_SLIME03, conformance_folders, needs, read_jsonl, write_log
from tests.support.slime03 import assert_matches_reference, folder_log
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.run.rebuild import rebuild

ray = needs("ray", "ray", module_level=True)
needs("ray.data", "ray", module_level=True)

# Ray's own modules warn about their dependencies; those are not tito's warnings.
pytestmark = [pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning"), pytest.mark.slow]

FOLDERS = conformance_folders()
SLIME03_FOLDERS = conformance_folders(CONFORMANCE_SLIME03)


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.name for f in FOLDERS])
def test_ray_matches_local_engine(folder: Path, tmp_path: Path) -> None:
    from tito_cli.run.ray_data import rebuild_ray

    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    policy = SlimeV4(fork_threshold=int((folder / "threshold").read_text()))

    local = rebuild([logs], tmp_path / "local.parquet", policy, workers=1)
    on_ray = rebuild_ray([logs], tmp_path / "ray.parquet", policy)

    # The same sink: the same schema metadata, compression and row groups.
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    assert pq.read_table(tmp_path / "ray.parquet").num_rows == local.samples_written
    assert [r.to_dict() for r in on_ray.rejected] == [r.to_dict() for r in local.rejected]
    assert on_ray.sessions == local.sessions
    assert on_ray.totals == local.totals
    assert (tmp_path / "ray.parquet.rejects.jsonl").read_text() == (
        tmp_path / "local.parquet.rejects.jsonl"
    ).read_text()


def test_ray_keeps_its_info_lines_off_the_terminal_and_rejects_unfinished_sessions(tmp_path: Path) -> None:
    import json
    import logging

    from tito_cli.run.ray_data import rebuild_ray

    folder = next(f for f in FOLDERS if f.name == "cases-threshold-1024")
    logs = tmp_path / "logs"
    sessions = read_jsonl(folder / "sessions.jsonl")
    write_log(logs, read_jsonl(folder / "turns.jsonl"), sessions[1:], max_rows=97)
    unfinished = sessions[0]["session_id"]

    class Lines(logging.Handler):
        def __init__(self) -> None:
            super().__init__(logging.DEBUG)
            self.levels: list[int] = []

        def emit(self, record: logging.LogRecord) -> None:
            self.levels.append(record.levelno)

    seen = Lines()
    ray_data_logger = logging.getLogger("ray.data")
    ray_data_logger.addHandler(seen)
    try:
        ray_data_logger.setLevel(logging.INFO)  # as Ray sets it up
        rebuild_ray([logs], tmp_path / "loud", quiet=False)
        assert logging.INFO in seen.levels  # the lines a quiet run must not show
        seen.levels.clear()
        summary = rebuild_ray([logs], tmp_path / "ray", unfinished="reject")
        assert [level for level in seen.levels if level < logging.ERROR] == []
    finally:
        ray_data_logger.removeHandler(seen)
    local = rebuild([logs], tmp_path / "local.parquet", workers=1, unfinished="reject")
    assert [r.to_dict() for r in summary.rejected] == [r.to_dict() for r in local.rejected]
    assert unfinished in {r.session_id for r in summary.rejected}
    reports = [json.loads(line) for line in (tmp_path / "ray.rejects.jsonl").read_text().splitlines()]
    assert any(r["session_id"] == unfinished and r["reason"].startswith("no sessions row") for r in reports)


@pytest.mark.parametrize("fmt", ["skyrl", "slime"])
def test_ray_writes_the_trainer_formats_through_the_same_sink(fmt: str, tmp_path: Path) -> None:
    from tito_cli.run.ray_data import rebuild_ray

    if fmt == "slime":
        needs("torch", "slime")
    folder = FOLDERS[0]
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    policy = SlimeV4(fork_threshold=int((folder / "threshold").read_text()))
    # --logprobs keep: the conformance corpus mixes sessions with and without recorded logprobs.
    options = {"logprobs": "keep"} if fmt == "slime" else None

    rebuild([logs], tmp_path / "local.out", policy, workers=1, output_format=fmt, options=options)
    rebuild_ray([logs], tmp_path / "ray.out", policy, output_format=fmt, options=options)
    assert (tmp_path / "ray.out").read_bytes() == (tmp_path / "local.out").read_bytes()


@pytest.mark.parametrize("folder", SLIME03_FOLDERS, ids=[f.name for f in SLIME03_FOLDERS])
def test_ray_matches_the_slime03_reference(folder: Path, tmp_path: Path) -> None:
    """``tito rebuild --engine ray --policy slime-0.3``: the reference's samples, flags, rollout ids, left-out notes."""

    logs = tmp_path / "logs"
    options = folder_log(folder, logs)
    out = tmp_path / "ray.parquet"
    result = tito("rebuild", str(logs), "--out", str(out), "--engine", "ray", *options)
    assert result.exit_code == 0, result.output
    assert_matches_reference(folder, pq.read_table(out).to_pylist(), result.stderr)


def test_ray_reads_an_optional_column_that_only_some_files_have(tmp_path: Path) -> None:
    """A log of old files (no ill_formed column) and new ones: Ray reads the column as the local reader does."""
    from tito_cli.algorithm.policies import Slime03
    from tito_cli.run.ray_data import rebuild_ray

    folder = CONFORMANCE_SLIME03 / "cases-threshold-1024"
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=7)
    files = sorted(logs.glob("turns-*.parquet"))
    # Every other file loses the column (as a writer before it wrote them); the flags those carried go.
    for path in files[::2]:
        table = pq.read_table(path)
        pq.write_table(table.drop_columns(["ill_formed"]).replace_schema_metadata(table.schema.metadata), path)
    assert any("ill_formed" in pq.read_schema(p).names for p in files)
    local = rebuild([logs], tmp_path / "local.parquet", Slime03(), workers=1)
    rebuild_ray([logs], tmp_path / "ray.parquet", Slime03())
    assert (tmp_path / "ray.parquet").read_bytes() == (tmp_path / "local.parquet").read_bytes()
    want = pq.read_table(tmp_path / "local.parquet")
    assert local.sessions > 0
    assert any(json.loads(m)["ill_formed"] for m in want.column("metadata").to_pylist())


def test_ray_never_writes_over_its_input_or_into_a_folder(tmp_path: Path) -> None:
    """The local runner's output rules hold for --engine ray too: an --out that is one of the log's files
    (here through a symlink) or a folder is refused with exit 5's error, whatever --overwrite says."""
    from tito_cli.errors import OutputError
    from tito_cli.run.ray_data import rebuild_ray

    folder = FOLDERS[0]
    logs = tmp_path / "logs"
    [turns_file, *_] = sorted(
        p for p in write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"))
        if p.name.startswith("turns-")
    )
    before = turns_file.read_bytes()
    link = tmp_path / "latest.parquet"
    link.symlink_to(turns_file)
    for out in (turns_file, link):
        with pytest.raises(OutputError):
            rebuild_ray([logs], out, SlimeV4(), overwrite=True)
        assert turns_file.read_bytes() == before
    with pytest.raises(OutputError):
        rebuild_ray([logs], logs, SlimeV4(), overwrite=True)
    assert turns_file.read_bytes() == before
