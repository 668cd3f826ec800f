"""``tito inspect``: each view in plain text and JSON, the trained marks against the rebuilt samples, errors."""

from __future__ import annotations

import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from rich.console import Console
from rich.text import Text

from tests.support.cli import tito
from tests.support.helpers import conformance_folders, read_jsonl, write_log
from tests.support.scenario_logs import TOKENIZER, scenario_log
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.session import SessionResult
from tito_cli.cli.app import out_console
from tito_cli.cli.viewing import UNWRAPPED, choose_tokenizer, is_plain, with_pager
from tito_cli.errors import EXIT_BAD_INPUT, EXIT_OK, EXIT_REJECTED, EXIT_USAGE
from tito_cli.render.drift import render_drift_windows
from tito_cli.render.plain import to_plain
from tito_cli.render.sample_text import render_samples, seq_ranges
from tito_cli.render.session_view import DECISION_LEGEND, render_tree, render_turns
from tito_cli.report.drift import divergences
from tito_cli.report.drift_points import drift_points
from tito_cli.report.session_facts import samples_data, tree_nodes, turn_rows
from tito_cli.run.corpus import Corpus
from tito_cli.tokenizer import TokenText, visible
from tito_cli.turns import Reject

MAIN = "s-7f3a-fix-tests"


@pytest.fixture(autouse=True)
def _fixed_width(monkeypatch: pytest.MonkeyPatch) -> None:
    # Plain output is laid out $COLUMNS wide; fix it so the expected lines hold on any terminal.
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("TITO_LOGS", raising=False)


@pytest.fixture(scope="module")
def agent_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_log("agent", tmp_path_factory.mktemp("agent") / "logs")


@pytest.fixture(scope="module")
def agent_logs_no_tokenizer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_log("agent", tmp_path_factory.mktemp("agent-ids") / "logs", tokenizer=None)


def run(*args: str, env: dict[str, str] | None = None) -> tuple[int, list[str], str]:
    result = tito(*list(args), env=env)
    return result.exit_code, result.stdout.splitlines(), result.stderr


def main_result(logs: Path) -> SessionResult:
    result = Corpus.open([logs]).session(MAIN)
    assert isinstance(result, SessionResult)
    return result


# -- turns and tree: the realign, the sub-agent and the fork are all shown ------------------------


def test_turns_view_shows_each_decision(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", "s-7f3a", "--logs", str(agent_logs), "--view", "turns")
    assert code == EXIT_OK
    assert lines == [
        "session s-7f3a-fix-tests  reward 1 · 6 turns · 3 leaves · 4 samples",
        "tokens trained 268 · context 62 · forks 2 (before latest response 2) · realigns 1 · rewrite merges 0",
        "policy slime-v4, fork threshold 1024, reward split",
        "1 segment without trained tokens dropped",
        "",
        "turns",
        "seq  #  finish      prompt  output  lp   decision                                   trained in",
        "  0  1  tool_calls      40      68  yes  start: first turn on its path              sample 0",
        "  1  2  tool_calls     127      96  yes  realign at 81 (-27)                        sample 0",
        "  2  3  stop            43       8  yes  start: first turn on its path              sample 3",
        "  3  4  tool_calls     239      55  yes  clean: extends held tokens                 sample 0",
        "  4  5  length         245      19  yes  fork: before latest response at 41 (-253)  sample 1",
        "  5  6  stop           245      49  yes  fork: before latest response at 41 (-253)  sample 2",
        # Piped output is never wrapped: the legend is one line.
        "at N: tokens the prompt shares with those held for its path; (-N): held tokens it does not repeat. "
        "A realign cuts them and continues the sample; a fork starts a new one.",
    ]


def test_turns_view_agrees_with_the_linearizer(agent_logs: Path) -> None:
    """The JSON turn rows carry the engine's own decisions, not a re-derivation."""
    code, lines, _ = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "turns", "--json")
    assert code == EXIT_OK
    rows = json.loads("\n".join(lines))["turns"]
    result = main_result(agent_logs)
    first: dict[int, Any] = {}
    for d in result.linearization.decisions:
        first.setdefault(d.seq, d)
    assert [r["seq"] for r in rows] == sorted(t.seq for t in result.tree.turns)
    for row in rows:
        d = first[row["seq"]]
        assert row["decision"] == {
            "kind": d.kind,
            "lcp": d.lcp,
            "drift": d.drift,
            "cause": d.cause.value if d.cause else None,
            "effect": None,
        }
        trained_in = [i for i, s in enumerate(result.samples) if row["seq"] in s.trained_seqs]
        assert row["trained_in"] == trained_in
    kinds = {r["seq"]: r["decision"]["kind"] for r in rows}
    assert kinds == {0: "start", 1: "realign", 2: "start", 3: "clean", 4: "fork", 5: "fork"}


def test_tree_view_marks_sub_agent_realign_fork_and_retry(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "tree")
    assert code == EXIT_OK
    tree = lines[lines.index("routing tree") + 1 :]
    assert tree == [
        "s-7f3a-fix-tests",
        # Piped output is never cropped either: previews are whole (up to their 200 characters).
        "├── ⑂ main  system    [3 tools] You are a coding agent. Use the tools to inspect and fix the repository.",
        "│   user      The test test_add fails. Please fix it.",
        "│   assistant seq 0 #1 in 40 out 68 tool_calls  [reasoning] → run_tests",
        "│   tool      FAILED tests/test_utils.py::test_add - assert add(2, 2) == 4",
        "│   assistant seq 1 #2 in 127 out 96 tool_calls realign at 81 (-27)  [reasoning] → spawn_agent",
        "│   tool      src/utils.py:12",
        "│   assistant seq 3 #4 in 239 out 55 tool_calls  [reasoning] → read_file",
        "│   tool      def add(a, b): return a - b",
        "│   user      Keep the fix minimal.",
        "│   ├── ⑂ first try  assistant seq 4 #5 in 245 out 19 length fork: before latest response  "
        "The bug is in add: it subtracts.",
        "│   │             ⤷ leaf 0 → samples 0, 1",
        "│   └── ⑂ retry  assistant seq 5 #6 in 245 out 49 stop fork: before latest response  "
        "[reasoning] Fixed: add now returns a + b.",
        "│                 ⤷ leaf 1 → sample 2",
        "└── ⑂ sub-agent  system    You are a search sub-agent. Answer with file paths only.",
        "    user      Find where add is defined",
        "    assistant seq 2 #3 in 43 out 8 stop  src/utils.py:12",
        "              ⤷ leaf 2 → sample 3",
    ]


def test_tree_view_marks_a_rewrite_merge(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", "s-7f9c", "--logs", str(agent_logs), "--view", "tree,turns")
    assert code == EXIT_OK
    assert "  0  1  stop            45      27  yes  rewritten by seq 1 (27 tok abandoned)  —" in lines
    assert "    assistant ⇄ rewrite of seq 0 merged (27 tok abandoned)  Hi!" in lines
    # The views come in a fixed order whatever order --view names them in.
    assert lines.index("turns") < lines.index("routing tree")


def test_tree_json_is_flat_and_complete(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "tree", "--json")
    assert code == EXIT_OK
    data = json.loads("\n".join(lines))
    assert set(data) == {"session", "tree"}
    nodes = data["tree"]
    result = main_result(agent_logs)
    assert len(nodes) == sum(1 for _ in result.tree.root.walk()) - 1
    assert [n["id"] for n in nodes] == list(range(len(nodes)))
    assert all(n["parent"] is None or n["parent"] < n["id"] for n in nodes)
    generated = {n["seq"]: n for n in nodes if n["kind"] == "generated"}
    assert sorted(generated) == [0, 1, 2, 3, 4, 5]
    assert generated[2]["parent"] is not None
    sub_agent_root = nodes[nodes[generated[2]["parent"]]["parent"]]
    assert (sub_agent_root["role"], sub_agent_root["branch"]) == ("system", "sub-agent")
    assert generated[5]["branch"] == "retry"
    assert generated[1]["decision"]["kind"] == "realign"
    assert generated[4]["decision"]["cause"] == "before_latest_response"
    leaves = [n for n in nodes if n["leaf"] is not None]
    assert [n["samples"] for n in leaves] == [[0, 1], [2], [3]]


# -- samples: the marks are the loss mask -------------------------------------------------------


def parse_id_view(lines: list[str]) -> list[tuple[list[int], list[int]]]:
    """Read the plain samples view in id mode back into (tokens, response loss mask) per sample.

    Labels (``── …``, ``┄ …``) are skipped; ids between ``[`` and ``]`` are trained.
    """
    samples: list[tuple[list[int], list[int]]] = []
    first_prompt: dict[int, int] = {}
    body = lines[lines.index("samples") + 1 :]
    tokens: list[int] = []
    trained: list[bool] = []
    inside = False
    for line in body:
        heading = re.match(r"sample (\d+)  ", line)
        if heading:
            tokens, trained = [], []
            samples.append((tokens, trained))  # type: ignore[arg-type]
            continue
        counts = re.match(r"  [\d,]+ tokens = first prompt ([\d,]+)", line)
        if counts:
            first_prompt[len(samples) - 1] = int(counts.group(1).replace(",", ""))
            continue
        if not line or line.startswith(("──", "┄", "  turns ")):
            continue
        for word in line.split():
            if word.startswith("["):
                inside = True
                word = word[1:]
            closes = word.endswith("]")
            word = word.rstrip("]")
            tokens.append(int(word))
            trained.append(inside)
            if closes:
                inside = False
    return [
        (toks, [int(t) for t in flags[first_prompt[i] :]])  # type: ignore[misc]
        for i, (toks, flags) in enumerate(samples)
    ]


def test_samples_view_marks_exactly_the_trained_tokens(agent_logs_no_tokenizer: Path, tmp_path: Path) -> None:
    """Acceptance: the bracketed ids of the plain view are the loss-1 tokens of the rebuilt samples file."""
    out = tmp_path / "samples.parquet"
    assert run("rebuild", str(agent_logs_no_tokenizer), "--out", str(out))[0] == EXIT_REJECTED
    rows = [r for r in pq.read_table(out).to_pylist() if r["session_id"] == MAIN]
    assert len(rows) == 4

    code, lines, err = run("inspect", MAIN, "--logs", str(agent_logs_no_tokenizer), "--view", "samples", "--full")
    assert code == EXIT_OK
    assert "no tokenizer recorded in the log: showing token ids (pass --tokenizer PATH)" in err
    shown = parse_id_view(lines)
    assert len(shown) == len(rows)
    for (tokens, mask), row in zip(shown, rows, strict=True):
        assert tokens == row["tokens"]
        assert mask == row["loss_mask"]
        assert sum(mask) > 0


def test_samples_view_decoded_brackets_hold_the_trained_text(agent_logs: Path) -> None:
    """With the tokenizer recorded in the log, each [...] holds the decoded text of one loss-1 run."""
    code, lines, err = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "samples", "--full")
    assert code == EXIT_OK
    assert err == ""
    body = "\n".join(lines[lines.index("samples") + 1 :])
    # A line break follows every visible newline; undo it to get the token text back.
    text = body.replace("↵\n", "↵")
    bracketed = re.findall(r"\[([^\]]*)\]", "\n".join(x for x in text.splitlines() if not x.startswith("──")))

    decoder = TokenText.open(str(TOKENIZER))
    expected = []
    for sample in main_result(agent_logs).samples:
        mask = sample.loss_mask
        start = None
        for i in range(len(mask) + 1):
            on = i < len(mask) and mask[i] == 1
            if on and start is None:
                start = i
            elif not on and start is not None:
                offset = sample.first_prompt_length
                expected.append(decoder.text(sample.tokens[offset + start : offset + i].tolist()))
                start = None
    assert bracketed == expected
    assert "[src/utils.py:12<|im_end|>]" in lines


def test_samples_view_labels_spans_and_realign(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "samples")
    assert code == EXIT_OK
    assert lines[lines.index("samples") + 1 : lines.index("samples") + 6] == [
        "sample 0  leaf 0 segment 0 · reward 0.25",
        "  294 tokens = first prompt 40 + response 254 (192 trained)",
        "  turns 0-1, 3 · trained 0-1, 3",
        "┄ seq 0 first prompt: 40 tokens, not shown ┄",
        "── seq 0 output · 41 tokens · trained · 27 of 68 cut by the next turn's realign",
    ]
    assert "── seq 1 prompt · 46 new tokens from 81 (realigned) · context" in lines
    assert "sample 1  leaf 0 segment 1 · reward 0.25 · starts at a fork (before latest response)" in lines
    # Whitespace is visible: the tool result's tab and the spaces of the sub-agent's answer.
    assert "Run␣the␣failing␣test␣first␣to␣see␣the␣error.↵" in lines


def test_long_context_runs_collapse_unless_full(tmp_path: Path) -> None:
    prompt0 = list(range(1, 11))
    out0 = [500, 501, 502]
    tool = list(range(1000, 1100))  # a 100-token tool result: context
    turns = [
        {"session_id": "long", "seq": 0, "prompt_ids": prompt0, "output_ids": out0,
         "prompt_messages": [{"role": "user", "content": "go"}],
         "response_message": {"role": "assistant", "content": "a"}},
        {"session_id": "long", "seq": 1, "prompt_ids": prompt0 + out0 + tool, "output_ids": [600, 601],
         "prompt_messages": [{"role": "user", "content": "go"}, {"role": "assistant", "content": "a"},
                             {"role": "tool", "content": "t"}],
         "response_message": {"role": "assistant", "content": "b"}},
    ]  # fmt: skip
    write_log(tmp_path / "logs", turns)
    code, lines, _ = run("inspect", "long", "--logs", str(tmp_path / "logs"), "--view", "samples")
    assert code == EXIT_OK
    body = lines[lines.index("samples") + 1 :]
    assert body == [
        "sample 0  leaf 0 segment 0 · reward 0",
        "  115 tokens = first prompt 10 + response 105 (5 trained)",
        "  turns 0-1 · trained 0-1",
        "┄ seq 0 first prompt: 10 tokens, not shown ┄",
        "── seq 0 output · 3 tokens · trained",
        "[500 501 502]",
        "── seq 1 prompt · 100 new tokens · context",
        " ".join(str(i) for i in range(1000, 1012)),
        "┄ 76 context tokens not shown ┄",
        " ".join(str(i) for i in range(1088, 1100)),
        "── seq 1 output · 2 tokens · trained",
        "[600 601]",
    ]
    code, lines, _ = run("inspect", "long", "--logs", str(tmp_path / "logs"), "--view", "samples", "--full")
    full = " ".join(lines)
    assert "not shown" not in full
    assert " ".join(str(i) for i in range(1000, 1100)) in " ".join(" ".join(lines).split())


def test_samples_json_regions_cover_the_sample(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "samples", "--json")
    assert code == EXIT_OK
    data = json.loads("\n".join(lines))
    assert data["tokenizer"] == str(TOKENIZER)
    result = main_result(agent_logs)
    assert [s["reward"] for s in data["samples"]] == result.rewards
    for shown, sample in zip(data["samples"], result.samples, strict=True):
        ids = [i for r in shown["regions"] for i in r["ids"]]
        assert ids == sample.tokens.tolist()
        flags = [int(r["trained"]) for r in shown["regions"] for _ in r["ids"]]
        assert flags[sample.first_prompt_length :] == sample.loss_mask.tolist()
        assert all(r["text"] is not None for r in shown["regions"])
        assert shown["trained_tokens"] == int(sample.loss_mask.sum())


def test_terminal_marks_trained_tokens_with_colour_not_brackets(agent_logs: Path) -> None:
    result = main_result(agent_logs)
    text = TokenText()
    console = Console(force_terminal=True, color_system="standard", width=100)
    with console.capture() as captured:
        console.print(render_samples(samples_data(result, text), text, brackets=False))
    shown = captured.get()
    trained_ids = " ".join(str(i) for i in result.samples[-1].tokens[-8:].tolist())
    assert f"\x1b[1;32m{trained_ids}\x1b[0m" in shown  # bold green
    without_codes = re.sub(r"\x1b\[[0-9;]*m", "", shown)
    assert "[" not in without_codes and "]" not in without_codes


def test_plain_output_has_no_ansi_codes(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, "--logs", str(agent_logs))
    assert code == EXIT_OK
    assert not any("\x1b" in line for line in lines)
    assert not any(line != line.rstrip() for line in lines)


def test_no_color_on_a_terminal_means_brackets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(type(out_console), "is_terminal", property(lambda self: True))
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setattr(out_console, "no_color", False)
    assert not is_plain()
    monkeypatch.setenv("NO_COLOR", "1")
    assert is_plain()


def test_whitespace_made_visible() -> None:
    assert visible("a b\n\tc") == "a␣b↵⇥c"


# -- finding the session, and errors -------------------------------------------------------------


def test_unknown_session_lists_nothing_but_says_how_many(agent_logs: Path) -> None:
    code, lines, err = run("inspect", "zzz", "--logs", str(agent_logs))
    assert code == EXIT_USAGE
    assert lines == []
    assert err.splitlines() == [
        "ERROR no session matches 'zzz' (4 sessions in the log)",
        "TIP run 'tito ls' to list the sessions",
    ]


def test_ambiguous_prefix_lists_candidates(agent_logs: Path) -> None:
    code, _, err = run("inspect", "s-7f", "--logs", str(agent_logs))
    assert code == EXIT_USAGE
    assert err.splitlines() == [
        "ERROR 's-7f' matches 2 sessions; give more of the id",
        "candidates:",
        "  s-7f3a-fix-tests",
        "  s-7f9c-rewrite",
    ]


def test_rejected_session_names_file_row_and_reason(agent_logs: Path) -> None:
    code, lines, err = run("inspect", "s-9e", "--logs", str(agent_logs))
    assert code == EXIT_REJECTED
    assert lines == []
    assert re.fullmatch(
        r"ERROR \S+\.parquet, row \d+, session 's-9e44-bad': rejected, it yields no samples: "
        r"output_logprobs length differs from output_ids length \(6 logprobs, 7 output ids\)\n",
        err,
    )


def test_session_without_samples_says_so(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", "s-81d0", "--logs", str(agent_logs))
    assert code == EXIT_OK
    assert "1 turn skipped (empty prompt) · 1 segment without trained tokens dropped" in lines
    assert "  1                                 skipped: empty prompt_messages  —" in lines
    assert lines[-1] == "no samples: nothing trained after a first prompt"


def test_logs_folder_from_environment(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", "s-7f9c", "--view", "turns", env={"TITO_LOGS": str(agent_logs)})
    assert code == EXIT_OK
    assert lines[0].startswith("session s-7f9c-rewrite")


def test_missing_logs_folder(tmp_path: Path) -> None:
    code, _, err = run("inspect", "x", "--logs", str(tmp_path / "nope"))
    assert code == EXIT_BAD_INPUT
    assert "no such log folder" in err and "TITO_LOGS" in err


def test_bad_view_and_bad_tokenizer_are_usage_errors(agent_logs: Path, tmp_path: Path) -> None:
    code, _, err = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "turns,bogus")
    assert code == EXIT_USAGE
    assert "unknown view bogus" in err
    code, _, err = run("inspect", MAIN, "--logs", str(agent_logs), "--tokenizer", str(tmp_path / "none"))
    assert code == EXIT_USAGE
    assert f"to be found at '{tmp_path / 'none'}', is not found here" in " ".join(err.split())


def test_recorded_tokenizer_not_found_falls_back_to_ids(tmp_path: Path) -> None:
    logs = scenario_log("agent", tmp_path / "logs", tokenizer="no/such/tokenizer")
    code, lines, err = run("inspect", "s-7f9c", "--logs", str(logs), "--view", "samples")
    assert code == EXIT_OK
    note = " ".join(err.split())
    assert note.startswith("the log's tokenizer 'no/such/tokenizer' is not found here (tried the folder no/such/")
    assert note.endswith(
        "and the working directory; tito's shipped tokenizers (qwen3, small)): "
        "showing token ids (pass --tokenizer PATH)"
    )
    assert lines[-1].startswith("[") and all(w.strip("[]").isdigit() for w in lines[-1].split())


def test_explicit_tokenizer_overrides_the_log(agent_logs_no_tokenizer: Path) -> None:
    code, lines, err = run(
        "inspect", "s-7f9c", "--logs", str(agent_logs_no_tokenizer), "--view", "samples", "--tokenizer", str(TOKENIZER)
    )
    assert code == EXIT_OK
    assert err == ""
    assert lines[-3:] == ["[<tool_call>↵", '{"name":␣"ls",␣"arguments":␣{}}↵', "</tool_call><|im_end|>]"]


# -- acceptance on the demo logs (fixtures/logs, from the simulator) ------------------------------

DEMO_LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "logs"
#: A demo session with a sub-agent, realigns and forks, and drift of every class.
DEMO = "qwen3-0-0028"


def test_demo_session_shows_sub_agent_realign_and_fork() -> None:
    code, lines, _ = run("inspect", DEMO, "--logs", str(DEMO_LOGS), "--view", "turns,tree", "--json")
    assert code == EXIT_OK
    data = json.loads("\n".join(lines))
    kinds = {row["seq"]: row["decision"]["kind"] for row in data["turns"] if row["decision"]}
    realigned = [seq for seq, kind in kinds.items() if kind == "realign"]
    forked = [seq for seq, kind in kinds.items() if kind == "fork"]
    assert realigned and forked
    assert any(n["branch"] == "sub-agent" for n in data["tree"])

    code, lines, _ = run("inspect", DEMO, "--logs", str(DEMO_LOGS), "--view", "turns,tree")
    assert code == EXIT_OK
    turns = lines[lines.index("turns") + 2 : lines.index("routing tree")]
    by_seq = {int(line.split()[0]): line for line in turns if line[:3].strip().isdigit()}
    for seq in realigned:
        assert " realign at " in by_seq[seq]
    for seq in forked:
        assert " fork: " in by_seq[seq]
    tree = lines[lines.index("routing tree") + 1 :]
    assert any("⑂ sub-agent  system" in line for line in tree)
    for seq in realigned:
        assert any(f"seq {seq} #" in line and " realign at " in line for line in tree)
    for seq in forked:
        assert any(f"seq {seq} #" in line and " fork: " in line for line in tree)


def test_demo_samples_view_marks_exactly_the_trained_tokens(tmp_path: Path) -> None:
    out = tmp_path / "samples.parquet"
    assert run("rebuild", str(DEMO_LOGS), "--out", str(out))[0] == EXIT_OK
    rows = [r for r in pq.read_table(out).to_pylist() if r["session_id"] == DEMO]

    code, lines, _ = run("inspect", DEMO, "--logs", str(DEMO_LOGS), "--view", "samples", "--full", "--ids")
    assert code == EXIT_OK
    shown = parse_id_view(lines)
    assert len(shown) == len(rows) >= 2
    for (tokens, mask), row in zip(shown, rows, strict=True):
        assert tokens == row["tokens"]
        assert mask == row["loss_mask"]


def test_demo_tokenizer_is_found_from_the_log() -> None:
    """The demo log records ``fixtures/tokenizers/qwen3`` (relative); it is found from the log's folder."""
    code, lines, err = run("inspect", DEMO, "--logs", str(DEMO_LOGS), "--view", "samples")
    assert code == EXIT_OK
    assert err == ""
    assert any("<|im_end|>" in line for line in lines)


def test_demo_drift_view_shows_each_class_decoded() -> None:
    """Acceptance (#17): a fork with reasoning dropped, realigns re-tokenized and with tool-call args re-rendered."""
    code, lines, err = run("inspect", DEMO, "--logs", str(DEMO_LOGS), "--view", "drift")
    assert code == EXIT_OK and err == ""
    body = lines[lines.index("drift") + 1 :]
    headings = [i for i, line in enumerate(body) if line.startswith("seq ")]
    shown = {}
    for i in headings:
        kind = "fork" if " fork: " in body[i] else "realign"
        cls = body[i].rsplit("  ", 1)[1]
        held, prompt = body[i + 1].strip(), body[i + 2].strip()
        assert held.startswith("held ") and prompt.startswith("prompt ")
        assert held.split(" ▸ ", 1)[0].split(None, 1)[1] == prompt.split(" ▸ ", 1)[0].split(None, 1)[1]
        shown.setdefault((kind, cls), (held, prompt))
    fork_reasoning = shown[("fork", "reasoning dropped")]
    assert "▸ <think>↵" in fork_reasoning[0] and "<think>" not in fork_reasoning[1].split(" ▸ ", 1)[1]
    retokenized = shown[("realign", "re-tokenized")]
    assert retokenized[0] != retokenized[1]
    args = shown[("realign", "tool-call args re-rendered")]
    assert '":"' in args[0].split(" ▸ ", 1)[1] and '":␣"' in args[1].split(" ▸ ", 1)[1]

    code, lines, _ = run("inspect", DEMO, "--logs", str(DEMO_LOGS), "--view", "drift", "--json")
    data = json.loads("\n".join(lines))
    assert data["tokenizer"] == "fixtures/tokenizers/qwen3"
    result = Corpus.open([DEMO_LOGS]).session(DEMO)
    assert isinstance(result, SessionResult)
    decided = {(d.seq, d.kind) for d in result.linearization.decisions if d.kind in ("fork", "realign")}
    assert {(d["seq"], d["kind"]) for d in data["drift"]} == decided
    for d in data["drift"]:
        assert d["held_ids"][: d["index"] - d["window_start"]] == d["prompt_ids"][: d["index"] - d["window_start"]]
        assert d["held_ids"][d["index"] - d["window_start"]] != d["prompt_ids"][d["index"] - d["window_start"]]
        assert d["class"] in ("reasoning dropped", "re-tokenized", "tool-call args re-rendered", "other")


def test_seq_ranges() -> None:
    assert seq_ranges([0, 1, 2, 5, 7, 8]) == "0-2, 5, 7-8"
    assert seq_ranges([3]) == "3" and seq_ranges([]) == "none"


@pytest.mark.parametrize("folder", conformance_folders(), ids=lambda f: f.name)
def test_every_conformance_session_renders_and_agrees(folder: Path, tmp_path: Path) -> None:
    """All views build for every reference case, and the regions are each sample's tokens and mask."""
    write_log(tmp_path / "logs", read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"))
    policy = SlimeV4(fork_threshold=int((folder / "threshold").read_text()))
    text = TokenText()
    for result in Corpus.open([tmp_path / "logs"]).results(policy):
        if isinstance(result, Reject):
            continue
        rows = turn_rows(result)
        assert [r["seq"] for r in rows] == sorted([t.seq for t in result.tree.turns] + result.tree.skipped)
        nodes = tree_nodes(result)
        assert sum(n["kind"] == "generated" for n in nodes) == len(result.tree.turns) - len(result.tree.merges)
        data = samples_data(result, text)
        for shown, sample in zip(data, result.samples, strict=True):
            assert [i for r in shown["regions"] for i in r["ids"]] == sample.tokens.tolist()
            flags = [int(r["trained"]) for r in shown["regions"] for _ in r["ids"]]
            assert flags[sample.first_prompt_length :] == sample.loss_mask.tolist()
        if folder.name.startswith("cases"):  # laying out text is the slow part: the named cases suffice
            plain = to_plain(render_samples(data, text, brackets=True))
            plain += to_plain(render_tree(result.session_id, nodes)) + to_plain(render_turns(rows))
            assert plain.count("[") == plain.count("]")


# -- navigating a long session: --sample, --turns, --around, --drift, LOGS, the pager ------------


def test_logs_folder_as_an_argument(agent_logs: Path) -> None:
    by_option = run("inspect", MAIN, "--logs", str(agent_logs), "--view", "turns")
    by_argument = run("inspect", MAIN, str(agent_logs), "--view", "turns")
    assert by_argument[0] == EXIT_OK and by_argument[1] == by_option[1]
    code, _, err = run("inspect", MAIN, str(agent_logs), "--logs", str(agent_logs / "other"))
    assert code == EXIT_USAGE and "two log folders" in err


def test_one_sample(agent_logs_no_tokenizer: Path) -> None:
    code, lines, _ = run("inspect", MAIN, str(agent_logs_no_tokenizer), "--sample", "2", "--full")
    assert code == EXIT_OK
    # Only the samples view, only sample 2, and its marks are still its loss mask.
    assert "turns" not in lines and "routing tree" not in lines
    assert [line.split()[1] for line in lines if re.match(r"sample \d+  ", line)] == ["2"]
    result = main_result(agent_logs_no_tokenizer)
    (tokens, mask), = parse_id_view(lines)
    assert tokens == result.samples[2].tokens.tolist()
    assert mask == result.samples[2].loss_mask.tolist()
    code, _, err = run("inspect", MAIN, str(agent_logs_no_tokenizer), "--sample", "4")
    assert code == EXIT_USAGE and "has 4 samples (0 to 3)" in err


def test_a_turn_range(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, str(agent_logs), "--turns", "1..3", "--view", "turns,samples", "--json")
    assert code == EXIT_OK
    data = json.loads("\n".join(lines))
    assert [r["seq"] for r in data["turns"]] == [1, 2, 3]
    assert data["samples"], "samples packing seqs 1-3 are shown"
    for sample in data["samples"]:
        assert {r["seq"] for r in sample["regions"]} <= {1, 2, 3}
        assert sample["shown"] == {"turns": [1, 3], "tokens": None, "focus": None}
        for region in sample["regions"]:
            assert len(region["ids"]) == region["end"] - region["start"]
    for value in ("3..1", "a..b"):
        assert run("inspect", MAIN, str(agent_logs), "--turns", value)[0] == EXIT_USAGE


def test_around_a_token(agent_logs_no_tokenizer: Path) -> None:
    result = main_result(agent_logs_no_tokenizer)
    tokens = result.samples[0].tokens.tolist()
    at = len(tokens) // 2
    code, lines, _ = run("inspect", MAIN, str(agent_logs_no_tokenizer), "--sample", "0", "--around", str(at), "--json")
    assert code == EXIT_OK
    (sample,) = json.loads("\n".join(lines))["samples"]
    lo, hi = sample["shown"]["tokens"]
    assert lo <= at < hi and hi - lo <= 2 * 64 + 1
    shown = [t for r in sample["regions"] for t in r["ids"]]
    assert shown == tokens[lo:hi]
    assert sample["shown"]["focus"] == at
    # In text, the token asked about is marked (between ⟦ ⟧ when piped), and only it.
    code, lines, _ = run("inspect", MAIN, str(agent_logs_no_tokenizer), "--sample", "0", "--around", str(at))
    marked = re.findall(r"⟦(\d+)⟧", "\n".join(lines))
    assert marked == [str(tokens[at])]


def test_drift_shows_each_fork_and_realign_in_three_lines(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, str(agent_logs), "--drift")
    assert code == EXIT_OK
    result = main_result(agent_logs)
    expected = sorted(s for s, d in result.linearization.turn_decisions().items() if d.kind in ("fork", "realign"))
    heads = [i for i, line in enumerate(lines) if re.match(r"seq \d+ · (fork|realign)", line)]
    assert [int(lines[i].split()[1]) for i in heads] == expected
    for i in heads:
        # A heading, the held tokens and the prompt's: a drift point fits in a screen whatever the session's size.
        assert lines[i + 1].startswith("  held   ") and lines[i + 2].startswith("  prompt ")
        assert lines[i + 3 : i + 4] in ([], [""])
        assert lines[i + 1].count("⟦") == lines[i + 2].count("⟦") == 1
        held = lines[i + 1][len("  held   ") :]
        prompt = lines[i + 2][len("  prompt ") :]
        assert held[: held.index("⟦")] == prompt[: prompt.index("⟦")]  # the same up to the first difference

    code, lines, _ = run("inspect", MAIN, str(agent_logs), "--drift", "--json")
    points = json.loads("\n".join(lines))["drift"]
    decisions = result.linearization.turn_decisions()
    for p in points:
        d = decisions[p["seq"]]
        assert (p["kind"], p["index"], p["held_length"] - p["index"]) == (d.kind, d.lcp, d.drift)
        assert p["held_text"] is not None and p["prompt_text"] is not None


def test_demo_drift_points_fit_a_screen() -> None:
    """Every demo session: each drift point is three lines (unwrapped), one line per window.

    Rendered as ``inspect --drift`` renders them, with the log opened and the tokenizer loaded once (a
    command per session loads both 32 times: most of a minute); one session goes through the command
    to show it prints the same.
    """
    corpus = Corpus.open([DEMO_LOGS])
    text, note = choose_tokenizer(None, corpus.tokenizer, DEMO_LOGS)
    assert note is None
    shown: dict[str, list[str]] = {}
    for result in corpus.results():
        assert isinstance(result, SessionResult)
        points = drift_points(result, divergences(result, text))
        body = to_plain(render_drift_windows(points, text, plain=True), UNWRAPPED).splitlines()  # piped
        shown[result.session_id] = body
        if body == ["no fork or realign: every prompt extended the tokens held for its path"]:
            continue
        blocks = "\n".join(body).split("\n\n")
        assert all(len(block.splitlines()) == 3 for block in blocks), result.session_id
    sid = next(sid for sid, body in shown.items() if len(body) > 3)
    code, lines, _ = run("inspect", sid, str(DEMO_LOGS), "--drift")
    assert code == EXIT_OK
    assert lines[lines.index("") + 1 :] == shown[sid]  # below the header


def test_piped_output_is_not_wrapped(agent_logs: Path) -> None:
    code, lines, _ = run("inspect", MAIN, str(agent_logs), "--view", "turns", env={"COLUMNS": "40"})
    assert code == EXIT_OK
    assert any(len(line) > 40 for line in lines)
    assert DECISION_LEGEND in lines


def test_pager_gets_the_output_with_less_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got, options = tmp_path / "paged.txt", tmp_path / "less.txt"
    script = (
        "import os, sys; "
        f"open({str(got)!r}, 'w').write(sys.stdin.read()); open({str(options)!r}, 'w').write(os.environ['LESS'])"
    )
    monkeypatch.setenv("TITO_PAGER", f"{sys.executable} -c {shlex.quote(script)}")
    monkeypatch.delenv("LESS", raising=False)
    with_pager(Text("a line for the pager"))
    assert "a line for the pager" in got.read_text()
    assert options.read_text() == "FRX"


def test_a_near_miss_suggests_the_closest_session_ids(agent_logs: Path) -> None:
    code, lines, err = run("inspect", "s-7f3a-fix-test5", "--logs", str(agent_logs))
    assert code == EXIT_USAGE
    assert lines == []
    assert err.splitlines()[:3] == [
        "ERROR no session matches 's-7f3a-fix-test5' (4 sessions in the log)",
        "did you mean:",
        "  s-7f3a-fix-tests",
    ]
    assert "TIP" not in err
