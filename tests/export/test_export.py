"""``tito export`` and ``rebuild --format``: samples → each trainer's format → read back by the trainer's rules.

slime's dumps are read with real torch (``torch.load(..., weights_only=False)``, as
slime's ``--load-debug-rollout-data`` does) and every record goes through a reader
that follows slime's ``Sample.from_dict``; SkyRL's and TRL's files are read with
their documented column conventions.  The samples come from the demo log, whose
GRPO groups have sessions that forked.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import REPO, needs
from tito_cli._atomic import publish
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, EXIT_USAGE, ExportError
from tito_cli.export.base import SinkContext
from tito_cli.export.formats import format_names, open_sink
from tito_cli.export.slime import SlimeOptions
from tito_cli.run.export import export_samples
from tito_cli.run.rebuild import rebuild
from tito_cli.schema import SAMPLES_SCHEMA

try:
    import torch
except ImportError:  # only the slime tests need it: they ask for it through the `slime` mark
    torch = None


@pytest.fixture()
def needs_torch() -> None:
    needs("torch", "slime")


#: A test that writes or reads slime dumps (torch files): skipped without the slime extra, failed under CI.
slime = pytest.mark.usefixtures("needs_torch")

DEMO = REPO / "fixtures" / "logs"


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("samples") / "samples.parquet"
    rebuild([DEMO], out, workers=1)
    return out


def sample_rows(path: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    return rows


def run(*args: str) -> tuple[int, str]:
    result = tito(*list(args))
    return result.exit_code, result.stderr


# -- a reader that follows slime's rules ------------------------------------------------------------

SLIME_STATUS = {"pending", "completed", "truncated", "aborted", "failed"}


@dataclasses.dataclass
class SlimeSample:
    """The fields of slime's ``Sample`` (slime/utils/types.py) that training reads, with slime's defaults."""

    group_index: int | None = None
    index: int | None = None
    prompt: Any = ""
    tokens: list[int] = dataclasses.field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: str | None = None
    reward: Any = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    remove_sample: bool = False
    status: str = "pending"
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    session_id: str | None = None
    spec_info: dict[str, int] = dataclasses.field(default_factory=dict)
    prefix_cache_info: dict[str, int] = dataclasses.field(default_factory=dict)


def from_dict(data: dict[str, Any]) -> SlimeSample:
    """slime's ``Sample.from_dict``: ``status`` required (a value string), the two info dicts optional, extra
    keys set as attributes; then what training asserts of a loaded sample."""
    data = dict(data)
    assert data["status"] in SLIME_STATUS
    for info in ("spec_info", "prefix_cache_info"):
        assert isinstance(data.get(info, {}), dict)
    names = {f.name for f in dataclasses.fields(SlimeSample)}
    sample = SlimeSample(**{k: v for k, v in data.items() if k in names})
    for key, value in data.items():
        if key not in names:
            setattr(sample, key, value)
    assert isinstance(sample.metadata, dict)
    assert isinstance(sample.tokens, list) and all(isinstance(t, int) for t in sample.tokens)
    assert sample.loss_mask is not None and len(sample.loss_mask) == sample.response_length
    if sample.rollout_log_probs is not None:
        assert len(sample.rollout_log_probs) == sample.response_length
    return sample


def load_dump(path: Path) -> tuple[int, list[SlimeSample]]:
    payload = torch.load(path, weights_only=False)
    assert set(payload) == {"rollout_id", "samples"}
    loaded = [from_dict(d) for d in payload["samples"]]
    # slime uses rollout logprobs for every sample if the first has them: all or none.
    assert len({s.rollout_log_probs is None for s in loaded}) <= 1
    return payload["rollout_id"], loaded


def group_runs(loaded: list[SlimeSample]) -> list[int | None]:
    """The group of each run of consecutive samples: a group appearing twice was split apart."""
    runs: list[int | None] = []
    for s in loaded:
        if not runs or runs[-1] != s.group_index or s.group_index is None:
            runs.append(s.group_index)
    return runs


# -- slime ------------------------------------------------------------------------------------------


@slime
def test_slime_round_trip_gives_back_every_sample(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "rollout.pt"
    code, _ = run("export", str(samples), "--to", "slime", "--out", str(out))
    assert code == EXIT_OK
    rollout_id, loaded = load_dump(out)
    assert rollout_id == 0
    rows = sample_rows(samples)
    assert len(loaded) == len(rows)

    by_key = {(r["session_id"], r["sample_index"]): r for r in rows}
    # The dump holds the same samples, matched by session and order within the session.
    per_session: dict[str, list[SlimeSample]] = defaultdict(list)
    for s in loaded:
        per_session[str(s.session_id)].append(s)
    for (sid, i), r in by_key.items():
        s = per_session[sid][i]
        assert s.tokens == r["tokens"]
        assert s.loss_mask == r["loss_mask"]
        assert s.rollout_log_probs == r["rollout_log_probs"]
        assert s.reward == r["reward"]
        assert s.response_length == r["response_length"]
        assert (s.group_index, s.index, s.label) == (r["group_index"], r["index"], r["label"])
        assert s.metadata == json.loads(r["metadata"])
        assert s.status == "completed"
        # SPEC §8.8: without a rollout_id column, the session's index; siblings share it.
        assert s.rollout_id == r["index"]  # type: ignore[attr-defined]

    # Groups in group_index order, each group's samples together (sessions without a group last).
    runs = group_runs(loaded)
    grouped = [g for g in runs if g is not None]
    assert grouped == sorted(set(grouped))
    assert all(g is None for g in runs[len(grouped) :])


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo's samples without its session that has no sessions row (and so no group_index)."""
    out = tmp_path_factory.mktemp("grouped") / "grouped.parquet"
    rebuild([DEMO], out, workers=1, unfinished="reject")
    return out


@slime
def test_split_by_refuses_a_session_without_a_group_index(samples: Path, tmp_path: Path) -> None:
    # A group of one in a dump of its own: slime's GRPO normalization makes its reward NaN.
    pattern = tmp_path / "rollout_{rollout_id}.pt"
    code, err = run("export", str(samples), "--to", "slime", "--split-by", "3", "--out", str(pattern))
    assert code == EXIT_USAGE and "session 'qwen3-0-0029' has no group_index" in err, err
    assert list(tmp_path.iterdir()) == []


@slime
def test_split_by_writes_whole_groups_per_file(grouped: Path, tmp_path: Path) -> None:
    samples = grouped
    pattern = tmp_path / "rollout_{rollout_id}.pt"
    code, _ = run("export", str(samples), "--to", "slime", "--split-by", "3", "--out", str(pattern))
    assert code == EXIT_OK
    groups = {r["group_index"] if r["group_index"] is not None else r["session_id"] for r in sample_rows(samples)}
    files = sorted(tmp_path.glob("rollout_*.pt"), key=lambda p: int(p.stem.split("_")[1]))
    assert len(files) == math.ceil(len(groups) / 3)
    seen: list[Any] = []
    total = 0
    for k, path in enumerate(files):
        rollout_id, loaded = load_dump(path)
        assert rollout_id == k and path.name == f"rollout_{k}.pt"
        in_file = {s.group_index if s.group_index is not None else s.session_id for s in loaded}
        assert len(in_file) <= 3
        assert not in_file & set(seen), "a group was split across files"
        seen.extend(in_file)
        total += len(loaded)
    assert total == len(sample_rows(samples))


@slime
def test_forked_leaf_keeps_the_sample_that_ends_each_session(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "leaf.pt"
    code, err = run("export", str(samples), "--to", "slime", "--forked", "leaf", "--out", str(out))
    assert code == EXIT_OK
    # Forks no longer break the counts; a group short of a session still does, and is named.
    assert "n_samples_per_prompt no longer holds" not in err
    assert "WARNING groups differ in size (sessions per group: 3 in 1 group, 4 in 7 groups)" in err
    _, loaded = load_dump(out)
    rows = sample_rows(samples)
    sessions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        sessions[r["session_id"]].append(r)
    assert sorted(str(s.session_id) for s in loaded) == sorted(sessions)
    for s in loaded:
        own = sessions[str(s.session_id)]
        last_turn = max(t for r in own for t in json.loads(r["metadata"])["tito"]["turns"])
        assert last_turn in s.metadata["tito"]["turns"]
        # The demo was rebuilt with --reward-mode split: the kept sample gets the session's whole reward.
        assert s.reward == pytest.approx(sum(r["reward"] for r in own))
    # One sample per session: every group's sample count is its session count again.
    counts: dict[Any, int] = defaultdict(int)
    for s in loaded:
        counts[s.group_index] += 1
    expected = defaultdict(int, {g: len({r["session_id"] for r in rows if r["group_index"] == g}) for g in counts})
    assert dict(counts) == dict(expected)


@slime
def test_forked_regroup_marks_each_sample_with_its_group(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "regroup.pt"
    assert run("export", str(samples), "--to", "slime", "--forked", "regroup", "--out", str(out))[0] == EXIT_OK
    _, loaded = load_dump(out)
    assert len(loaded) == len(sample_rows(samples))
    per_session: dict[str, int] = defaultdict(int)
    for s in loaded:
        per_session[str(s.session_id)] += 1
    for s in loaded:
        group = s.metadata["tito"]["group"]
        assert group["group_index"] == s.group_index
        assert group["session_samples"] == per_session[str(s.session_id)]
        assert group["sessions"] == len({t.session_id for t in loaded if t.group_index == s.group_index}) or (
            s.group_index is None and group["sessions"] == 1
        )


@slime
def test_a_forked_session_in_a_group_is_reported_with_expected_and_actual_counts(
    samples: Path, tmp_path: Path
) -> None:
    rows = sample_rows(samples)
    group0 = [r for r in rows if r["group_index"] == 0]
    sessions0 = sorted({r["session_id"] for r in group0})
    assert len(group0) > len(sessions0), "the demo's group 0 has a forked session"

    code, err = run("export", str(samples), "--to", "slime", "--out", str(tmp_path / "r.pt"))
    assert code == EXIT_OK
    assert "n_samples_per_prompt no longer holds" in err
    line = f"group 0: {len(sessions0)} sessions, expected {len(sessions0)} samples, got {len(group0)} ("
    assert line in err

    result = tito("stats", str(DEMO), "--json")
    assert result.exit_code == EXIT_OK
    mismatched = {g["group_index"]: g for g in json.loads(result.stdout)["groups"]["mismatched"]}
    assert mismatched[0]["expected_samples"] == len(sessions0)
    assert mismatched[0]["samples"] == len(group0)
    forked = {sid: n for sid in sessions0 if (n := sum(r["session_id"] == sid for r in group0)) != 1}
    assert mismatched[0]["sessions_not_one_sample"] == forked


def samples_table(sessions: dict[str, list[float]]) -> list[pa.Table]:
    """One table per session, one sample each, whose trained tokens have these logprobs."""
    tables = []
    for sid, logprobs in sessions.items():
        n = len(logprobs)
        tables.append(
            pa.table(
                {
                    "session_id": [sid],
                    "sample_index": pa.array([0], pa.int32()),
                    "tokens": pa.array([[1, 2, *range(10, 10 + n)]], pa.list_(pa.int32())),
                    "response_length": pa.array([n], pa.int32()),
                    "loss_mask": pa.array([[1] * n], pa.list_(pa.int8())),
                    "rollout_log_probs": pa.array([logprobs], pa.list_(pa.float32())),
                    "reward": [1.0],
                    "index": pa.array([0], pa.int64()),
                    "group_index": pa.array([0], pa.int64()),
                    "rollout_id": pa.array([0], pa.int64()),
                    "label": pa.array([None], pa.string()),
                    "status": ["completed"],
                    "metadata": ['{"tito":{"turns":[0]}}'],
                },
                schema=SAMPLES_SCHEMA,
            )
        )
    return tables


@slime
def test_logprobs_are_all_or_none(tmp_path: Path) -> None:
    mixed = samples_table({"a": [-0.5, -0.25], "b": [0.0, 0.0]})
    sink = open_sink("slime", tmp_path / "x.pt", SinkContext())
    for table in mixed:
        sink.add(table)
    with pytest.raises(ExportError, match=r"1 samples have no rollout logprobs .*session 'b'"):
        sink.close()
    sink.abort()
    assert list(tmp_path.iterdir()) == []

    for choice, expected in (("drop", [None, None]), ("keep", [[-0.5, -0.25], [0.0, 0.0]])):
        out = tmp_path / f"{choice}.pt"
        sink = open_sink("slime", out, SinkContext(options=SlimeOptions(logprobs=choice)))  # type: ignore[arg-type]
        for table in mixed:
            sink.add(table)
        publish(sink.close())
        assert [s.rollout_log_probs for s in load_dump(out)[1]] == expected

    # With no logprobs anywhere, auto writes none (0.0 would read as probability 1).
    out = tmp_path / "none.pt"
    sink = open_sink("slime", out, SinkContext())
    for table in samples_table({"a": [0.0], "b": [0.0, 0.0]}):
        sink.add(table)
    publish(sink.close())
    assert [s.rollout_log_probs for s in load_dump(out)[1]] == [None, None]


def test_slime_without_torch_is_a_clear_error(
    samples: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ExportError, match="torch is not installed") as caught:
        open_sink("slime", tmp_path / "x.pt", SinkContext())
    assert caught.value.tip is not None and "tito-cli[slime]" in caught.value.tip
    # No wheel of one machine: the CPU index works anywhere.
    assert "torch==" not in caught.value.tip and "download.pytorch.org/whl/cpu" in caught.value.tip
    # On the command line: a usage error whose tip keeps its brackets (not eaten as rich markup).
    code, err = run("export", str(samples), "--to", "slime", "--out", str(tmp_path / "x.pt"))
    assert code == EXIT_USAGE
    assert "TIP pip install 'tito-cli[slime]'" in err


# -- skyrl and trl ----------------------------------------------------------------------------------


def test_skyrl_rows_are_unpadded_with_a_full_length_loss_mask(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "sft.parquet"
    assert run("export", str(samples), "--to", "skyrl", "--out", str(out))[0] == EXIT_OK
    table = pq.read_table(out)
    assert table.column_names == ["input_ids", "loss_mask"]
    rows = sample_rows(samples)
    assert table.num_rows == len(rows)
    for got, r in zip(table.to_pylist(), rows, strict=True):
        # SkyRL: input_ids unpadded, loss_mask the same length, 0/1, 0 over the first prompt.
        assert got["input_ids"] == r["tokens"]
        assert len(got["loss_mask"]) == len(got["input_ids"])
        assert set(got["loss_mask"]) <= {0, 1}
        prompt = len(r["tokens"]) - r["response_length"]
        assert got["loss_mask"][:prompt] == [0] * prompt
        assert got["loss_mask"][prompt:] == r["loss_mask"]


def test_trl_masks_and_labels(samples: Path, tmp_path: Path) -> None:
    out = tmp_path / "trl.parquet"
    assert run("export", str(samples), "--to", "trl", "--labels", "--out", str(out))[0] == EXIT_OK
    table = pq.read_table(out)
    assert table.column_names == ["input_ids", "assistant_masks", "labels"]
    for got, r in zip(table.to_pylist(), sample_rows(samples), strict=True):
        prompt = len(r["tokens"]) - r["response_length"]
        mask = [0] * prompt + r["loss_mask"]
        assert got["input_ids"] == r["tokens"] and got["assistant_masks"] == mask
        # TRL's collator: labels as given, then labels[assistant_masks == 0] = -100 — the same labels.
        labels = np.asarray(got["labels"])
        applied = labels.copy()
        applied[np.asarray(got["assistant_masks"]) == 0] = -100
        assert (applied == labels).all()
        assert [t for t, m in zip(got["input_ids"], mask, strict=True) if m] == [x for x in got["labels"] if x != -100]

    plain = tmp_path / "plain.parquet"
    assert run("export", str(samples), "--to", "trl", "--out", str(plain))[0] == EXIT_OK
    assert pq.read_table(plain).column_names == ["input_ids", "assistant_masks"]


# -- rebuild --format: the same sinks, no intermediate file ------------------------------------------


@pytest.mark.parametrize("fmt", ["slime", "skyrl", "trl"])
def test_rebuild_format_writes_what_export_writes(fmt: str, samples: Path, tmp_path: Path) -> None:
    if fmt == "slime":
        needs("torch", "slime")
    direct = tmp_path / f"direct.{fmt}"
    summary = rebuild([DEMO], direct, workers=1, output_format=fmt)
    assert summary.files == [direct] and (tmp_path / f"direct.{fmt}.rejects.jsonl").is_file()
    exported = tmp_path / f"exported.{fmt}"
    export_samples(samples, exported, fmt)
    # Byte for byte (for slime too: the torch archive is not named after the temporary file).
    assert direct.read_bytes() == exported.read_bytes()
    again = tmp_path / f"again.{fmt}"
    export_samples(samples, again, fmt)
    assert again.read_bytes() == exported.read_bytes()


def test_format_names_are_the_export_modules() -> None:
    assert format_names() == ["parquet", "skyrl", "slime", "trl"]


@slime
def test_bad_exports_are_usage_or_input_errors(samples: Path, tmp_path: Path) -> None:
    code, err = run("export", str(samples), "--to", "slime", "--split-by", "2", "--out", str(tmp_path / "x.pt"))
    assert code == EXIT_USAGE and "{rollout_id}" in err
    code, err = run("export", str(samples), "--to", "verl", "--out", str(tmp_path / "x"))
    assert code == EXIT_USAGE and "'verl' is not one of skyrl, slime, trl" in err
    code, err = run("export", str(samples), "--to", "skyrl", "--labels", "--out", str(tmp_path / "x.parquet"))
    assert code == EXIT_USAGE and "applies to the trl format only, not skyrl" in err
    code, err = run("rebuild", str(DEMO), "--split-by", "2", "--out", str(tmp_path / "x.parquet"))
    assert code == EXIT_USAGE and "applies to the slime format only, not parquet" in err
    assert not (tmp_path / "x.parquet").exists()
    turns = next(DEMO.glob("turns-*.parquet"))
    code, err = run("export", str(turns), "--to", "skyrl", "--out", str(tmp_path / "x.parquet"))
    assert code == EXIT_BAD_INPUT and "not a samples file" in err
    (tmp_path / "exists.parquet").write_bytes(b"keep")
    code, err = run("export", str(samples), "--to", "trl", "--out", str(tmp_path / "exists.parquet"))
    assert code != EXIT_OK and "output exists" in err
    assert (tmp_path / "exists.parquet").read_bytes() == b"keep"


# -- streaming --------------------------------------------------------------------------------------


@slime
def test_sessions_are_cut_whole_across_row_groups(samples: Path, tmp_path: Path) -> None:
    from tito_cli.run.export import tables_by_session

    table = pq.read_table(samples)
    # Row groups of 7 rows cut sessions anywhere; the sessions come back whole and in order.
    pieces = [table.slice(i, 7) for i in range(0, table.num_rows, 7)]
    sessions = list(tables_by_session(pieces))
    ids = [t.column("session_id")[0].as_py() for t in sessions]
    assert ids == sorted(set(table.column("session_id").to_pylist()))
    assert all(len(set(t.column("session_id").to_pylist())) == 1 for t in sessions)
    assert pa.concat_tables(sessions).equals(table)

    # A samples file written in row groups of 7 rows exports exactly as the original does.
    small = tmp_path / "small-row-groups.parquet"
    pq.write_table(table, small, row_group_size=7)
    assert pq.ParquetFile(small).num_row_groups > 10
    for name, source in (("a", samples), ("b", small)):
        export_samples(source, tmp_path / f"{name}.pt", "slime")
        export_samples(source, tmp_path / f"{name}.parquet", "skyrl")
    assert torch.load(tmp_path / "a.pt", weights_only=False) == torch.load(tmp_path / "b.pt", weights_only=False)
    assert pq.read_table(tmp_path / "a.parquet").equals(pq.read_table(tmp_path / "b.parquet"))


@slime
def test_rebuild_format_slime_split_by_names_the_rejects_report_for_the_pattern(tmp_path: Path) -> None:
    code, err = run(
        "rebuild", str(DEMO), "--format", "slime", "--split-by", "3", "--forked", "leaf", "-j", "1",
        "--unfinished", "reject", "--out", str(tmp_path / "rollout_{rollout_id}.pt"),
    )
    assert code == EXIT_REJECTED, err  # the session without a sessions row, and so without a group_index
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["rollout_0.pt", "rollout_1.pt", "rollout_2.pt", "rollout_all.pt.rejects.jsonl"]
    assert "wrote 3 files (slime):" in err
    loaded = [s for k in range(3) for s in load_dump(tmp_path / f"rollout_{k}.pt")[1]]
    assert len(loaded) == len({s.session_id for s in loaded})  # --forked leaf: one sample a session
