"""The Ray Data engine: the conformance corpus, rebuilt on a local Ray, gives the local engine's files, byte for byte.

Skipped when Ray is not installed (``pip install 'tito[ray]'``); CI installs it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tito_cli.algorithm.policy import Policy
from tito_cli.export.base import ExportOptions
from tito_cli.run.rebuild import rebuild

from .helpers import conformance_folders, read_jsonl, write_log

ray = pytest.importorskip("ray", reason="the Ray engine needs Ray Data: pip install 'tito[ray]'")
pytest.importorskip("ray.data", reason="the Ray engine needs Ray Data: pip install 'tito[ray]'")

# Ray's own modules warn about their dependencies; those are not tito's warnings.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")

FOLDERS = conformance_folders()


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
    policy = Policy(fork_threshold=int((folder / "threshold").read_text()))

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


@pytest.mark.parametrize("fmt", ["skyrl", "slime"])
def test_ray_writes_the_trainer_formats_through_the_same_sink(fmt: str, tmp_path: Path) -> None:
    from tito_cli.run.ray_data import rebuild_ray

    if fmt == "slime":
        pytest.importorskip("torch", reason="--format slime writes torch files: pip install 'tito[slime]'")
    folder = FOLDERS[0]
    logs = tmp_path / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97)
    policy = Policy(fork_threshold=int((folder / "threshold").read_text()))
    # --logprobs keep: the conformance corpus mixes sessions with and without recorded logprobs.
    options = ExportOptions(logprobs="keep")

    rebuild([logs], tmp_path / "local.out", policy, workers=1, output_format=fmt, options=options)
    rebuild_ray([logs], tmp_path / "ray.out", policy, output_format=fmt, options=options)
    assert (tmp_path / "ray.out").read_bytes() == (tmp_path / "local.out").read_bytes()
