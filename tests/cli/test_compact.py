"""``tito compact``: both forms of a log rebuild to the same bytes (docs/spec.md §9.4)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.bad_input_runs import SCENARIO_ROOT, build_scenario
from tests.support.cli import tito
from tests.support.helpers import REPO, conformance_folders, read_jsonl, write_log
from tito_cli.errors import EXIT_OK, EXIT_OUTPUT, EXIT_REJECTED
from tito_cli.read import index_pass
from tito_cli.read.turnlog import TurnLog
from tito_cli.render.plain import to_plain
from tito_cli.render.summary import render_rebuild_summary
from tito_cli.run import rebuild as rebuild_module
from tito_cli.run.compact import compact
from tito_cli.run.rebuild import rejects_path
from tito_cli.schema import META_FORMAT

sys.path.insert(0, str(REPO))
from benchmarks.workload import WorkloadSpec, _generate_synthetic


def run(*args: object) -> tuple[int, str]:
    result = tito(*[str(a) for a in args])
    return result.exit_code, result.stderr


def rebuilt(log: Path, out: Path, *options: object) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Exit code, samples bytes and (session, reason) of every reject of a rebuild of ``log``."""
    code, stderr = run("rebuild", log, "--out", out, "--workers", "1", *options)
    assert code in (EXIT_OK, EXIT_REJECTED), stderr
    rejects = rejects_path(out)
    # A reason may name another row's place: the files differ between the forms, not the rows' content.
    reasons = [(r["session_id"], re.sub(r"\S+\.parquet, row \d+", "<row>", r["reason"])) for r in read_jsonl(rejects)]
    return code, out.read_bytes(), reasons


def formats(log: Path) -> set[str]:
    return {pq.read_schema(f.path).metadata[META_FORMAT.encode()].decode() for f in TurnLog.open([log]).turn_files}


def both_ways(log: Path, tmp_path: Path, *options: object) -> None:
    """``log`` compacted to format 2 and back to 1: all three rebuild to the same bytes and rejects."""
    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    code, stderr = run("compact", log, "--out", v2)
    assert code in (EXIT_OK, EXIT_REJECTED), stderr
    assert run("compact", v2, "--out", v1, "--format", "1")[0] == code
    assert formats(v2) >= {"2"} and "2" not in formats(v1) - formats(log)
    original = rebuilt(log, tmp_path / "original.parquet", *options)
    assert rebuilt(v2, tmp_path / "v2.parquet", *options) == original
    assert rebuilt(v1, tmp_path / "v1.parquet", *options) == original


@pytest.mark.slow
@pytest.mark.parametrize("folder", conformance_folders(), ids=lambda f: f.name)
def test_the_conformance_corpus_rebuilds_the_same_from_both_forms(folder: Path, tmp_path: Path) -> None:
    log = tmp_path / "logs"
    write_log(log, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=97, format=1)
    threshold = (folder / "threshold").read_text().strip()
    both_ways(log, tmp_path, "--fork-threshold", threshold)


def test_the_demo_logs_rebuild_the_same_from_both_forms(tmp_path: Path) -> None:
    both_ways(REPO / "fixtures" / "logs", tmp_path)


def test_a_benchmark_workload_rebuilds_the_same_and_format_2_is_far_smaller(tmp_path: Path) -> None:
    spec = WorkloadSpec(sessions=3, turns=12, system_tokens=600, tool_tokens=200, output_tokens=60, format=1)
    _generate_synthetic(spec, tmp_path / "logs")
    both_ways(tmp_path / "logs", tmp_path)

    def stored_ids(log: Path) -> int:
        return sum(len(pq.read_table(f.path, columns=["prompt_ids"]).column(0).combine_chunks().flatten())
                   for f in TurnLog.open([log]).turn_files)

    # Prompt ids stored once, not once per later turn (the sub-agent's 4 turns in between included).
    assert stored_ids(tmp_path / "v2") * 5 < stored_ids(tmp_path / "v1")


@pytest.mark.parametrize(
    "scenario", ["duplicate-seq", "format2-broken-references", "ids-out-of-range", "null-values", "malformed-json"]
)
def test_invalid_sessions_are_copied_unchanged_and_rejected_again(scenario: str, tmp_path: Path) -> None:
    build_scenario(SCENARIO_ROOT / scenario, tmp_path / "logs")
    code, stderr = run("compact", tmp_path / "logs", "--out", tmp_path / "v2")
    assert code == EXIT_REJECTED and "invalid sessions unchanged (a rebuild rejects them):" in stderr
    original = rebuilt(tmp_path / "logs", tmp_path / "original.parquet")
    assert original[2], "the scenario has rejects"
    assert rebuilt(tmp_path / "v2", tmp_path / "v2.parquet") == original


def test_compact_writes_a_new_folder_and_replaces_one_only_when_told(tmp_path: Path) -> None:
    out = tmp_path / "v2"
    code, stderr = run("compact", REPO / "fixtures" / "logs", "--out", out)
    assert code == EXIT_OK
    turns = sum(pq.ParquetFile(f).metadata.num_rows for f in (REPO / "fixtures" / "logs").glob("turns-*.parquet"))
    assert stderr.startswith(f"wrote 32 sessions ({turns} turns) in format 2 to {out}: ")
    assert sorted(p.name for p in out.iterdir()) == ["sessions-copied-000000.parquet", "turns-compact-000001.parquet"]
    code, stderr = run("compact", REPO / "fixtures" / "logs", "--out", out, "--format", "1")
    assert code == EXIT_OUTPUT and "output exists" in stderr and formats(out) == {"2"}
    assert run("compact", REPO / "fixtures" / "logs", "--out", out, "--format", "1", "--overwrite")[0] == EXIT_OK
    assert formats(out) == {"1"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "no temporary folder is left behind"


def test_timestamps_ill_formed_flags_and_tokenizer_are_kept(tmp_path: Path) -> None:
    shutil.copytree(REPO / "fixtures" / "logs", tmp_path / "logs")
    [before] = (tmp_path / "logs").glob("turns-*.parquet")
    table = pq.read_table(before)
    flags = [row % 7 == 3 for row in range(table.num_rows)]
    table = table.set_column(table.schema.get_field_index("ill_formed"), "ill_formed", pa.array(flags))
    pq.write_table(table, before)
    assert run("compact", tmp_path / "logs", "--out", tmp_path / "v1", "--format", "1")[0] == EXIT_OK
    [after] = (tmp_path / "v1").glob("turns-*.parquet")
    columns = ["session_id", "seq", "timestamp", "ill_formed"]
    key = [("session_id", "ascending"), ("seq", "ascending")]
    assert pq.read_table(after, columns=columns).sort_by(key) == pq.read_table(before, columns=columns).sort_by(key)
    assert TurnLog.open([tmp_path / "v1"]).tokenizer == TurnLog.open([tmp_path / "logs"]).tokenizer
    assert formats(tmp_path / "v1") == {"1"}


def test_a_huge_row_group_is_read_in_slices_and_compact_cuts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A foreign writer's one big row group (here 80 KiB of a 4,000-row-per-group writer; the bound scaled down).
    log = tmp_path / "logs"
    write_log(log, read_jsonl(REPO / "fixtures/conformance/random-threshold-1024/turns.jsonl"), format=1,
              row_group_rows=4000, row_group_bytes=1 << 30)
    monkeypatch.setattr(index_pass, "SLICE_BYTES", 16 << 10)
    slices = TurnLog.open([log]).index().row_groups
    assert len({(g.file, g.index) for g in slices}) == 1 and len(slices) > 2 and all(g.slice_rows for g in slices)
    summary = rebuild_module.rebuild([log], tmp_path / "a.parquet", workers=1)
    text = to_plain(render_rebuild_summary(summary), width=400)
    assert "warning" not in text.lower() and "note:" not in text
    # Rewritten by compact in row groups bounded by bytes (scaled down as well), read whole.
    compact([log], tmp_path / "v1", format=1, row_group_bytes=8 << 10)
    assert not any(g.slice_rows for g in TurnLog.open([tmp_path / "v1"]).index().row_groups)
    rebuild_module.rebuild([tmp_path / "v1"], tmp_path / "b.parquet", workers=1)
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()
