"""The sink seam: a run's files (samples or a trainer format, and the rejects report) appear together or not at all."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from tests.support.helpers import REPO
from tito_cli import _atomic
from tito_cli._atomic import StagedFile, publish
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.errors import OutputError
from tito_cli.export import rejects
from tito_cli.run.rebuild import rebuild

DEMO = REPO / "fixtures" / "logs"


def test_a_failed_rejects_write_keeps_the_previous_pair(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "samples.parquet"
    report = tmp_path / "samples.parquet.rejects.jsonl"
    rebuild([DEMO], out, SlimeV4(fork_threshold=0), workers=1)
    previous = out.read_bytes(), report.read_bytes()

    class Refused(StagedFile):
        def __init__(self, target: str | os.PathLike[str]) -> None:
            raise PermissionError(13, "Permission denied", str(target))

    monkeypatch.setattr(rejects, "StagedFile", Refused)
    with pytest.raises(OutputError, match="cannot write the rejects report"):
        rebuild([DEMO], out, SlimeV4(), workers=1, overwrite=True)
    # Not the new samples beside the old report: both as they were, no temporaries left.
    assert (out.read_bytes(), report.read_bytes()) == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["samples.parquet", "samples.parquet.rejects.jsonl"]


def test_publish_rolls_back_when_a_later_rename_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.write_text("old a")
    second.write_text("old b")
    staged = [StagedFile(first), StagedFile(second)]
    staged[0].path.write_text("new a")
    staged[1].path.write_text("new b")
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst) == second:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(_atomic.os, "replace", replace)
    with pytest.raises(OutputError, match="No space"):  # exit 5
        publish(staged)
    assert (first.read_text(), second.read_text()) == ("old a", "old b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]

    monkeypatch.setattr(_atomic.os, "replace", real_replace)
    staged = [StagedFile(first), StagedFile(tmp_path / "c")]
    staged[0].path.write_text("new a")
    staged[1].path.write_text("new c")
    publish(staged)
    assert (first.read_text(), (tmp_path / "c").read_text()) == ("new a", "new c")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "c"]


@pytest.mark.parametrize("fmt", ["parquet", "skyrl"])
def test_row_groups_do_not_depend_on_how_the_tables_were_cut(fmt: str, tmp_path: Path) -> None:
    """The Ray runner and ``export`` hand sinks slices of bigger tables; the local runner whole tables."""
    import pyarrow as pa

    from tito_cli.export.base import SinkContext
    from tito_cli.export.formats import open_sink
    from tito_cli.export.samples import session_table
    from tito_cli.run.corpus import Corpus
    from tito_cli.turns import Reject

    tables = [session_table(r) for r in Corpus.open([DEMO]).results() if not isinstance(r, Reject)]
    whole = pa.concat_tables(tables).combine_chunks()  # one chunk: the slices are views into it
    starts = [0]
    for t in tables:
        starts.append(starts[-1] + t.num_rows)
    sliced = [whole.slice(a, b - a) for a, b in itertools.pairwise(starts)]

    written = []
    for name, parts in (("whole", tables), ("sliced", sliced)):
        sink = open_sink(fmt, tmp_path / name, SinkContext())
        sink.row_group_tokens = 20_000  # type: ignore[attr-defined]  # several row groups from the demo
        for part in parts:
            sink.add(part)
        publish(sink.close())
        written.append((tmp_path / name).read_bytes())
    assert written[0] == written[1]
