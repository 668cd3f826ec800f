"""``tito ls`` and ``tito stats``: rows and totals agree with the rebuild; filters, sorting, errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import typer.main

from tests.support.cli import tito
from tests.support.helpers import CONFORMANCE, read_jsonl, write_log
from tests.support.scenario_logs import scenario_log
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.cli import app
from tito_cli.errors import EXIT_OK, EXIT_USAGE
from tito_cli.report.facts import FIELDS, percentiles
from tito_cli.report.filter import FilterError, compile_filter
from tito_cli.run.corpus import Corpus
from tito_cli.run.rebuild import rebuild
from tito_cli.turns import Reject


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("TITO_LOGS", raising=False)


@pytest.fixture(scope="module")
def agent_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_log("agent", tmp_path_factory.mktemp("agent") / "logs")


@pytest.fixture(scope="module")
def cases_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The conformance behaviour cases: forks of every cause, realigns, merges, a reject, empty prompts."""
    folder = CONFORMANCE / "cases-threshold-1024"
    logs = tmp_path_factory.mktemp("cases") / "logs"
    write_log(logs, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"), max_rows=50)
    return logs


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = tito(*list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def ls_json(logs: Path, *args: str) -> list[dict[str, Any]]:
    code, out, _ = run("ls", str(logs), "--json", *args)
    assert code == EXIT_OK
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


# -- ls --------------------------------------------------------------------------------------


def test_ls_plain(agent_logs: Path) -> None:
    code, out, err = run("ls", str(agent_logs))
    assert code == EXIT_OK
    lines = out.splitlines()
    reason = "output_logprobs length differs from output_ids length (6 logprobs, 7 output ids)"
    assert lines[:4] == [
        "session           turns  leaves  samples  trained  context  forks  realigns  merges  reward  rejected",
        "s-7f3a-fix-tests      6       3        4      268       62      2         1       0       1",
        "s-7f9c-rewrite        2       1        1       27        0      0         0       1     0.5",
        "s-81d0-empty          2       1        0        0        0      0         0       0       0",
    ]
    # A rejected session's counts are blank and its reason sits in the last column.
    assert lines[4].split(maxsplit=1) == ["s-9e44-bad", reason]
    assert lines[4].index(reason) == lines[0].index("rejected")
    # Sessions without a sessions row are named under the table (they train with reward 0.0).
    assert lines[5:8] == [
        "",
        "no sessions row (rebuilt with reward 0.0; --unfinished reject leaves them out):",
        "  s-81d0-empty",
    ]
    # Into a pipe nothing is cut; the reject's file and row follow the table.
    assert lines[8:10] == ["", "rejected:"]
    assert re.fullmatch(rf"  s-9e44-bad: {re.escape(reason)} \[\S+\.parquet, row \d+\]", lines[10])
    assert err == "4 of 4 sessions · policy slime-v4, fork threshold 1024, reward split\n"


def test_ls_rows_are_the_rebuild_reports(cases_logs: Path) -> None:
    rows = {r["session"]: r for r in ls_json(cases_logs)}
    results = list(Corpus.open([cases_logs]).results())
    assert sorted(rows) == [r.session_id for r in results]
    for item in results:
        row = rows[item.session_id]
        if isinstance(item, Reject):
            assert row["rejected"] == item.reason and row["samples"] is None
            assert row["file"] == item.file and row["row"] == item.row
            continue
        rep = item.report
        assert (row["turns"], row["leaves"], row["samples"]) == (rep.turns, rep.leaves, len(item.samples))
        assert row["trained"] == sum(int(s.loss_mask.sum()) for s in item.samples)
        assert (row["forks"], row["realigns"], row["merges"]) == (rep.fork_total, rep.realigns, rep.rewrite_merges)
        assert row["reward"] == item.info.reward and row["rejected"] is None


def test_ls_flags(cases_logs: Path) -> None:
    all_rows = ls_json(cases_logs)

    def names(*args: str) -> list[str]:
        return [r["session"] for r in ls_json(cases_logs, *args)]

    assert names("--forked") == [r["session"] for r in all_rows if r["forks"]]
    assert names("--realigned") == [r["session"] for r in all_rows if r["realigns"]]
    assert names("--merged") == [r["session"] for r in all_rows if r["merges"]]
    assert names("--rejected") == ["case-4.2"]
    assert names("--no-samples") == [r["session"] for r in all_rows if not r["samples"]]
    assert "case-4.2" in names("--no-samples") and "case-4.3" in names("--no-samples")
    assert names("--forked", "--merged") == [r["session"] for r in all_rows if r["forks"] and r["merges"]]
    assert names("--forked") and names("--realigned") and names("--merged")


def test_ls_where_expressions(cases_logs: Path) -> None:
    all_rows = ls_json(cases_logs)

    def names(expression: str) -> list[str]:
        return [r["session"] for r in ls_json(cases_logs, "--where", expression)]

    def expect(predicate: Any) -> list[str]:
        return [r["session"] for r in all_rows if predicate(r)]

    assert names("forks > 0 and samples >= 2") == expect(lambda r: (r["forks"] or 0) > 0 and (r["samples"] or 0) >= 2)
    assert names("leaves == 3 or merges") == expect(lambda r: r["leaves"] == 3 or r["merges"])
    assert names("not (samples > 0)") == expect(lambda r: not (r["samples"] or 0) > 0)
    assert names("session ~ '2.1'") == expect(lambda r: "2.1" in r["session"])
    assert names("rejected ~ logprobs") == ["case-4.2"]
    assert names("rejected != null") == ["case-4.2"]
    assert names("samples = 1 and reward > 0") == expect(lambda r: r["samples"] == 1 and (r["reward"] or 0) > 0)


def test_ls_sort_and_limit(cases_logs: Path) -> None:
    rows = ls_json(cases_logs, "--sort", "trained", "--desc")
    trained = [r["trained"] for r in rows if r["trained"] is not None]
    assert trained == sorted(trained, reverse=True)
    assert rows[-1]["trained"] is None  # the rejected session: nulls last
    top = ls_json(cases_logs, "--sort", "trained", "--desc", "--limit", "3")
    assert top == rows[:3]
    code, _, err = run("ls", str(cases_logs), "--sort", "trained", "-n", "2")
    assert code == EXIT_OK
    assert err.endswith("more not shown (--limit) · policy slime-v4, fork threshold 1024, reward split\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--where", "fork > 0"], "unknown field 'fork'"),
        (["--where", "forks >"], "the filter ends too early"),
        (["--where", "(forks > 0"], "missing ')'"),
        (["--where", "forks > 0 samples"], "unexpected 'samples'"),
        (["--sort", "size"], "cannot sort by 'size'"),
    ],
)
def test_ls_bad_filter_is_a_usage_error(agent_logs: Path, args: list[str], message: str) -> None:
    code, out, err = run("ls", str(agent_logs), *args)
    assert code == EXIT_USAGE
    assert out == ""
    assert message in " ".join(err.replace("│", " ").split())


def test_ls_nothing_matches(agent_logs: Path) -> None:
    code, out, err = run("ls", str(agent_logs), "--where", "turns > 100")
    assert (code, out) == (EXIT_OK, "")
    assert err == "no session matches (of 4) · policy slime-v4, fork threshold 1024, reward split\n"


def test_ls_logs_from_environment(agent_logs: Path) -> None:
    code, out, _ = run("ls", "--json", env={"TITO_LOGS": str(agent_logs)})
    assert code == EXIT_OK
    assert [r["session"] for r in json.loads(out)] == [
        "s-7f3a-fix-tests",
        "s-7f9c-rewrite",
        "s-81d0-empty",
        "s-9e44-bad",
    ]


def test_filter_null_semantics() -> None:
    rejected = {"session": "a", "samples": None, "rejected": "bad"}
    fine = {"session": "b", "samples": 0, "rejected": None}
    assert not compile_filter("samples < 1", FIELDS)(rejected)
    assert compile_filter("samples < 1", FIELDS)(fine)
    assert compile_filter("samples == null", FIELDS)(rejected) and not compile_filter("samples == null", FIELDS)(fine)
    assert compile_filter("samples != null", FIELDS)(fine) and not compile_filter("samples != null", FIELDS)(rejected)
    assert compile_filter("rejected", FIELDS)(rejected) and not compile_filter("rejected", FIELDS)(fine)
    with pytest.raises(FilterError, match="cannot compare session"):
        compile_filter("session > 3", FIELDS)(fine)


# -- stats -----------------------------------------------------------------------------------


def test_stats_totals_match_rebuild(cases_logs: Path, tmp_path: Path) -> None:
    code, out, _ = run("stats", str(cases_logs), "--json")
    assert code == EXIT_OK
    stats = json.loads(out)
    summary = rebuild([cases_logs], tmp_path / "s.parquet", SlimeV4())
    t = summary.totals
    assert stats["sessions"] == summary.sessions + len(summary.rejected)
    assert (stats["rebuilt"], stats["rejected"]) == (summary.sessions, len(summary.rejected))
    assert (stats["turns"], stats["skipped_turns"], stats["samples"]) == (t.turns, t.skipped_turns, t.samples)
    assert stats["tokens"]["trained"] == t.trained_tokens and stats["tokens"]["context"] == t.context_tokens
    assert stats["forks"]["by_cause"] == t.forks and stats["forks"]["total"] == t.fork_total
    assert stats["realigns"]["total"] == t.realigns and stats["rewrite_merges"] == t.rewrite_merges
    zero = stats["zero_sample_sessions"]
    assert sum(v["sessions"] for v in zero.values()) == summary.sessions_without_samples + len(summary.rejected)
    assert sum(stats["samples_per_session"]["histogram"].values()) == summary.sessions


def test_stats_distributions_and_reasons(agent_logs: Path) -> None:
    code, out, _ = run("stats", str(agent_logs), "--json")
    assert code == EXIT_OK
    stats = json.loads(out)
    prompt_lengths = []
    output_lengths = []
    for item in Corpus.open([agent_logs]).results():
        if not isinstance(item, Reject):
            prompt_lengths += [len(t.prompt_ids) for t in item.tree.turns]
            output_lengths += [len(t.output_ids) for t in item.tree.turns]
    assert stats["prompt_tokens"] == percentiles(prompt_lengths)
    assert stats["output_tokens"]["max"] == max(output_lengths)
    assert stats["samples_per_session"]["histogram"] == {"0": 1, "1": 1, "4": 1}
    assert stats["zero_sample_sessions"] == {
        "every output is empty": {"sessions": 1, "examples": ["s-81d0-empty"]},
        "rejected: output_logprobs length differs from output_ids length": {"sessions": 1, "examples": ["s-9e44-bad"]},
    }
    assert stats["sessions_without_sessions_row"] == 1


def test_stats_plain(agent_logs: Path) -> None:
    code, out, _ = run("stats", str(agent_logs))
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[:13] == [
        "policy slime-v4, fork threshold 1024, reward split",
        "sessions                    4  3 rebuilt, 1 rejected",
        "turns                      10  1 skipped (empty prompt)",
        "samples                     5",
        "trained tokens            295  82.6% of response tokens",
        "context tokens             62  loss 0 inside response regions",
        "forks                       2  20 per 100 turns, in 1 session",
        "  prompt region             0",
        "  before latest response    2",
        "  drift too long            0",
        "realigns                    1  10 per 100 turns, in 1 session",
        "rewrite merges              1",
        "no sessions row             1  sessions rebuilt with reward 0.0, e.g. s-81d0-empty",
    ]
    assert "prompt tokens per turn     64    245    245    245" in lines
    groups = lines.index("groups")
    assert lines[groups - 3 : groups - 1] == [
        "every output is empty                                            1  e.g. s-81d0-empty",
        "rejected: output_logprobs length differs from output_ids length  1  e.g. s-9e44-bad",
    ]
    # GRPO group integrity: the session that forked into 4 samples breaks its group's count.
    assert lines[groups + 1 :] == [
        "1 group by group_index (sessions per group: 2 in 1 group)",
        "1 group where samples ≠ sessions (n_samples_per_prompt breaks):",
        "group  sessions  expected  samples  sessions ≠ 1 sample",
        "    0         2         2        5  s-7f3a-fix-tests: 4",
    ]


def test_percentiles_are_nearest_rank() -> None:
    assert percentiles(range(1, 11)) == {"p50": 5, "p90": 9, "p99": 10, "max": 10}
    assert percentiles([7]) == {"p50": 7, "p90": 7, "p99": 7, "max": 7}
    assert percentiles([]) == {"p50": None, "p90": None, "p99": None, "max": None}


# -- every read command is documented ----------------------------------------------------------


@pytest.mark.parametrize("command", ["inspect", "ls", "stats"])
def test_every_option_has_help(command: str) -> None:
    code, _, _ = run(command, "--help")
    assert code == EXIT_OK
    click_command = typer.main.get_command(app).commands[command]  # type: ignore[attr-defined]
    for param in click_command.params:
        assert getattr(param, "help", None), f"{command} {param.name} has no help"
    assert command in Path(__file__).resolve().parents[2].joinpath("docs", "inspect.md").read_text()


def _grpo_rows(n: int) -> list[dict[str, Any]]:
    base = {"turns": 12, "leaves": 2, "samples": 3, "trained": 1234, "context": 5678, "forks": 1}
    base.update(realigns=0, merges=0, reward=0.5, unfinished=False, rejected=None, file=None, row=None)
    return [{"session": f"grpo/run-2026-11-30/prompt-00017/step-0042/rollout-{i}", **base} for i in range(n)]


@pytest.mark.parametrize("width", [200, 100, 80, 60])
def test_ls_keeps_session_ids_whole_and_drops_count_columns_first(width: int) -> None:
    from rich.console import Console

    from tito_cli.render.listing import render_listing

    rows = _grpo_rows(3)
    console = Console(width=width, force_terminal=False)
    with console.capture() as captured:
        console.print(render_listing(rows, width=width))
    lines = captured.get().splitlines()
    assert all(len(line) <= width for line in lines)
    for row in rows:
        assert any(line.split()[0] == row["session"] for line in lines[1:]), (width, lines)
    header = lines[0].split()
    assert header[0] == "session"
    if width >= 200:
        assert header[1:] == [
            "turns",
            "leaves",
            "samples",
            "trained",
            "context",
            "forks",
            "realigns",
            "merges",
            "reward",
        ]
    elif width == 80:
        assert header[1:] == ["samples", "forks", "reward"]  # the most telling counts stay longest


def test_ls_into_a_pipe_never_cuts_a_session_id(tmp_path: Path) -> None:
    sids = [f"grpo/run-2026-11-30/prompt-00017/step-0042/rollout-{i}" for i in range(3)]
    turns = [
        {
            "session_id": sid,
            "seq": 0,
            "prompt_ids": [1, 2],
            "output_ids": [3],
            "output_logprobs": [-0.5],
            "prompt_messages": [{"role": "user", "content": "hi"}],
            "response_message": {"role": "assistant", "content": "x"},
        }
        for sid in sids
    ]
    write_log(tmp_path / "logs", turns, [{"session_id": sid, "reward": 1.0} for sid in sids])
    code, out, _ = run("ls", str(tmp_path / "logs"))
    assert code == EXIT_OK
    assert [line.split()[0] for line in out.splitlines()[1:]] == sids
