"""``tito view``: the page is self-contained, holds every session asked for, and its numbers are the samples file's.

The browser side (rendering, tree, filters, the DOM's trained tokens) is in
``test_view_browser.py``; here the page's inline data is read back directly.
"""

from __future__ import annotations

import json
import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import write_log
from tests.support.scenario_logs import scenario_log
from tito_cli.algorithm.session import SessionResult
from tito_cli.errors import EXIT_OK, EXIT_OUTPUT, EXIT_USAGE
from tito_cli.render.html import bar_chart
from tito_cli.run.corpus import Corpus

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "logs"


def run(*args: str) -> tuple[int, str, str]:
    result = tito(*list(args))
    return result.exit_code, result.stdout, result.stderr


def page_data(page: str) -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="tito-data">(.*?)</script>', page, re.S)
    assert m is not None
    data: dict[str, Any] = json.loads(m.group(1))
    return data


@pytest.fixture(scope="module")
def demo_page(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("view") / "demo.html"
    code, _, err = run("view", "--all", "--logs", str(DEMO), "--out", str(out))
    assert code == EXIT_OK, err
    return out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def demo_samples(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, int], dict[str, Any]]:
    out = tmp_path_factory.mktemp("rebuild") / "samples.parquet"
    code, _, err = run("rebuild", str(DEMO), "--out", str(out))
    assert code == EXIT_OK, err
    rows = pq.read_table(out).to_pylist()
    return {(r["session_id"], r["sample_index"]): r for r in rows}


def test_every_demo_session_is_on_the_page(demo_page: str) -> None:
    ids = Corpus.open([DEMO]).session_ids()
    data = page_data(demo_page)
    assert sorted(data["sessions"]) == ids
    rows = re.findall(r'<tr data-session="([^"]+)"', demo_page)
    assert rows == ids
    assert f"{len(ids)} of {len(ids)} sessions" in demo_page


def test_the_page_fetches_nothing(demo_page: str) -> None:
    # A Content-Security-Policy forbids any load; and nothing on the page names one.
    assert "default-src 'none'" in demo_page
    assert not re.search(r"\b(src|href)\s*=\s*[\"']?(https?:|//)", demo_page, re.I)
    assert not re.search(r"<link\b|@import|url\(|\bfetch\(|XMLHttpRequest|<iframe", demo_page, re.I)
    # The only absolute URL is SVG's namespace name, which is never loaded.
    assert set(re.findall(r"https?://[^\s\"'<>]+", demo_page)) <= {"http://www.w3.org/2000/svg"}


def test_samples_on_the_page_are_the_samples_file(
    demo_page: str, demo_samples: dict[tuple[str, int], dict[str, Any]]
) -> None:
    data = page_data(demo_page)
    seen = 0
    for sid, session in data["sessions"].items():
        for sample in session["samples"]:
            row = demo_samples[(sid, sample["index"])]
            assert sample["ids"] == row["tokens"]
            assert sample["trained_tokens"] == sum(row["loss_mask"])
            assert sample["response_length"] == row["response_length"]
            # The regions cover the tokens, in order, and the trained ones are the loss mask.
            regions = sample["regions"]
            assert regions[0][2] == 0 and regions[-1][3] == len(row["tokens"])
            assert all(a[3] == b[2] for a, b in pairwise(regions))
            mask = [0] * sample["first_prompt_length"] + row["loss_mask"]
            trained = [i for kind, _, start, end, is_trained, _ in regions if is_trained for i in range(start, end)]
            assert trained == [i for i, m in enumerate(mask) if m]
            seen += 1
    assert seen == len(demo_samples)


def test_every_token_is_in_the_vocabulary(demo_page: str) -> None:
    data = page_data(demo_page)
    assert data["decodes"] is True
    used = {t for s in data["sessions"].values() for sample in s["samples"] for t in sample["ids"]}
    assert used <= {int(k) for k in data["vocab"]}
    # Chat-template markers are special tokens, drawn apart from text.
    specials = {data["vocab"][str(i)] for i in data["special"] if str(i) in data["vocab"]}
    assert "<|im_start|>" in specials


def test_drift_points_match_the_decisions(demo_page: str) -> None:
    data = page_data(demo_page)
    corpus = Corpus.open([DEMO])
    for result in corpus.results():
        assert isinstance(result, SessionResult)  # the demo log has no invalid session
        session = data["sessions"][result.session_id]
        decisions = result.linearization.turn_decisions()
        expected = sorted(seq for seq, d in decisions.items() if d.kind in ("fork", "realign"))
        assert [p["seq"] for p in session["drift"]] == expected
        for p in session["drift"]:
            d = decisions[p["seq"]]
            assert (p["kind"], p["index"], p["held_length"] - p["index"]) == (d.kind, d.lcp, d.drift)
            offset = p["index"] - p["window_start"]
            # The windows agree before the first difference and differ at it (or one of them ends there).
            assert p["held_ids"][:offset] == p["prompt_ids"][:offset]
            if offset < min(len(p["held_ids"]), len(p["prompt_ids"])):
                assert p["held_ids"][offset] != p["prompt_ids"][offset]


def test_some_sessions_only(tmp_path: Path) -> None:
    out = tmp_path / "two.html"
    code, _, err = run("view", "qwen3-0-0003", "qwen3-0-0009", "--logs", str(DEMO), "--out", str(out))
    assert code == EXIT_OK, err
    data = page_data(out.read_text(encoding="utf-8"))
    assert sorted(data["sessions"]) == ["qwen3-0-0003", "qwen3-0-0009"]


def test_rejected_session_is_listed_with_its_reason(tmp_path: Path) -> None:
    logs = scenario_log("agent", tmp_path / "logs")
    out = tmp_path / "agent.html"
    code, _, err = run("view", "--all", "--logs", str(logs), "--out", str(out))
    assert code == EXIT_OK, err
    page = out.read_text(encoding="utf-8")
    data = page_data(page)
    rejected = {sid: s["rejected"] for sid, s in data["sessions"].items() if s["rejected"]}
    assert rejected, "the agent scenario has a rejected session"
    for sid, why in rejected.items():
        assert why["reason"]
        assert re.search(rf'<tr data-session="{re.escape(sid)}"[^>]*data-rejected="1"', page)


def test_usage_and_output_errors(tmp_path: Path) -> None:
    code, _, err = run("view", "--logs", str(DEMO), "--out", str(tmp_path / "x.html"))
    assert code == EXIT_USAGE and "--all" in err
    code, _, err = run("view", "nope", "--logs", str(DEMO), "--out", str(tmp_path / "x.html"))
    assert code == EXIT_USAGE and "no session matches" in err
    code, _, err = run("view", "--all", "--logs", str(DEMO), "--out", str(tmp_path / "missing" / "x.html"))
    assert code == EXIT_OUTPUT
    assert not (tmp_path / "x.html").exists()


def test_bar_chart_scales_bars_and_escapes_labels() -> None:
    svg = bar_chart("t<1>", [("a&b", 10), ("c", 5), ("d", 0)])
    assert "t&lt;1&gt;" in svg and "a&amp;b" in svg
    widths = [int(w) for w in re.findall(r'<rect [^>]*width="(\d+)"', svg)]
    assert widths[0] == 2 * widths[1] and widths[2] == 0


def test_log_text_cannot_break_out_of_the_page(tmp_path: Path) -> None:
    hostile = "</script><img src=x onerror=alert(1)><!--"
    turns = [
        {
            "session_id": hostile,
            "prompt_ids": [1, 2, 3],
            "output_ids": [4, 5],
            "prompt_messages": [{"role": "user", "content": hostile}],
            "response_message": {"role": "assistant", "content": hostile},
        }
    ]
    write_log(tmp_path / "logs", turns, [{"session_id": hostile, "reward": 1.0}])
    out = tmp_path / "hostile.html"
    code, _, err = run("view", "--all", "--logs", str(tmp_path / "logs"), "--out", str(out))
    assert code == EXIT_OK, err
    page = out.read_text(encoding="utf-8")
    assert "<img" not in page and "<!--" not in page
    data = page_data(page)
    assert list(data["sessions"]) == [hostile]
    assert data["sessions"][hostile]["tree"][0]["preview"] == hostile


def test_policy_flag_filters_mark_the_sessions_whose_samples_carry_them(tmp_path: Path) -> None:
    """Under slime-0.3 the table offers the per-sample flags as filters (docs/spec.md §8.6), and a session's
    row carries each flag that some expected sample of the reference carries; slime-v4 pages offer none."""
    from tests.support.helpers import read_jsonl

    folder = ROOT / "fixtures" / "conformance-slime03" / "cases-threshold-1024"
    log = tmp_path / "logs"
    write_log(log, read_jsonl(folder / "turns.jsonl"), read_jsonl(folder / "sessions.jsonl"))
    out = tmp_path / "flags.html"
    threshold = (folder / "threshold").read_text().strip()
    code, _, err = run("view", "--all", "--logs", str(log), "--out", str(out), "--policy", "slime-0.3",
                       "--fork-threshold", threshold)
    assert code == EXIT_OK, err
    page = out.read_text(encoding="utf-8")
    rows = dict(re.findall(r'<tr data-session="([^"]+)"([^>]*)>', page))
    expected = {e["session_id"]: e["samples"] for e in read_jsonl(folder / "expected.jsonl")}
    for row_flag, sample_flag in (("truncated", "truncated"), ("usetool", "use_tool"), ("illformed", "ill_formed")):
        assert f'class="flag" value="{row_flag}"' in page
        marked = {sid for sid, attrs in rows.items() if f"data-{row_flag}=" in attrs}
        want = {sid for sid, samples in expected.items() if any(s["metadata"][sample_flag] for s in samples)}
        assert marked == want, row_flag
        assert want, f"the cases corpus has sessions flagged {sample_flag}"

    code, _, err = run("view", "--all", "--logs", str(log), "--out", str(out), "--fork-threshold", threshold)
    assert code == EXIT_OK, err
    assert 'value="illformed"' not in out.read_text(encoding="utf-8")
