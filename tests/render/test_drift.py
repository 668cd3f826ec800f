"""Drift diagnostics (report/drift.py): where a fork or realign diverged, both sides decoded, and its class."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import REPO
from tests.support.scenario_logs import TOKENIZER as SCENARIO_TOKENIZER
from tests.support.scenario_logs import scenario_log
from tito_cli.algorithm.policies import SlimeV4
from tito_cli.algorithm.session import SessionResult
from tito_cli.report.drift import (
    OTHER,
    REASONING_DROPPED,
    RETOKENIZED,
    TOOL_ARGS_RERENDERED,
    UNCLASSIFIED,
    DriftClassCounter,
    class_counts,
    classify,
    divergences,
)
from tito_cli.run.corpus import Corpus
from tito_cli.tokenizer import TokenText

SMALL = REPO / "fixtures" / "tokenizer"
QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"


@pytest.fixture(scope="module", params=[SMALL, QWEN3], ids=["small", "qwen3"])
def text(request: pytest.FixtureRequest) -> TokenText:
    return TokenText.open(str(request.param))


def encode(text: TokenText, s: str) -> list[int]:
    return list(text.tokenizer(s, add_special_tokens=False)["input_ids"])


def diverge(text: TokenText, held: str, prompt: str) -> str:
    """Classify the first divergence between the canonical ids of two texts."""
    a, b = np.asarray(encode(text, held)), np.asarray(encode(text, prompt))
    n = min(len(a), len(b))
    index = next(i for i in range(n) if a[i] != b[i])
    return classify(a, b, index, text)


PREFIX = "<|im_start|>user\nFix it.<|im_end|>\n<|im_start|>assistant\n"
CALL = '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/a.py", "limit": 20}}\n</tool_call>'


def test_reasoning_the_prompt_lacks(text: TokenText) -> None:
    held = PREFIX + "<think>\nRead the file first.\n</think>\n\n" + CALL + "<|im_end|>"
    prompt = PREFIX + CALL + "<|im_end|>\n<|im_start|>user\nMore."
    assert diverge(text, held, prompt) == REASONING_DROPPED


def test_tool_call_json_re_rendered_with_other_spacing_or_key_order(text: TokenText) -> None:
    loose = CALL.replace('": ', '":').replace(", ", ",")
    reordered = '<tool_call>\n{"name": "read_file", "arguments": {"limit": 20, "path": "src/a.py"}}\n</tool_call>'
    for held in (loose, reordered):
        assert diverge(text, PREFIX + held + "<|im_end|>", PREFIX + CALL + "<|im_end|>\n") == TOOL_ARGS_RERENDERED
    changed = CALL.replace("src/a.py", "src/b.py")
    assert diverge(text, PREFIX + changed + "<|im_end|>", PREFIX + CALL + "<|im_end|>") == OTHER


def test_same_text_other_ids_is_re_tokenized(text: TokenText) -> None:
    ids = encode(text, PREFIX + "Let me look at the repository layout.<|im_end|>")
    # The first token that is a merge of two others, spelled as those two (as sampling can).
    backend = json.loads(text.tokenizer.backend_tokenizer.to_str())["model"]
    vocab, merges = backend["vocab"], backend["merges"]
    parents = {}
    for merge in merges:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        if left + right in vocab:
            parents.setdefault(vocab[left + right], (vocab[left], vocab[right]))
    at = next(i for i in range(len(encode(text, PREFIX)), len(ids)) if ids[i] in parents)
    held = np.asarray([*ids[:at], *parents[ids[at]], *ids[at + 1 :]])
    prompt = np.asarray([*ids, *encode(text, "\n<|im_start|>user\nok")])
    assert classify(held, prompt, at, text) == RETOKENIZED
    assert diverge(text, PREFIX + "Let me look.", PREFIX + "Let me see.") == OTHER


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> SessionResult:
    logs = scenario_log("agent", tmp_path_factory.mktemp("drift") / "logs")
    result = Corpus.open([logs]).session("s-7f3a", SlimeV4())
    assert isinstance(result, SessionResult)
    return result


def test_every_fork_and_realign_once_with_windows_around_the_divergence(agent: SessionResult) -> None:
    text = TokenText.open(str(SCENARIO_TOKENIZER))
    found = divergences(agent, text, window=8)
    decided = {d.seq: d for d in reversed(agent.linearization.decisions) if d.kind in ("fork", "realign")}
    assert [(d.seq, d.kind, d.index, d.drift) for d in found] == [
        (s, d.kind, d.lcp, d.drift) for s, d in sorted(decided.items())
    ]
    assert [(d.seq, d.drift_class) for d in found] == [(1, RETOKENIZED), (4, REASONING_DROPPED), (5, REASONING_DROPPED)]
    chains = {t.seq: t for t in agent.tree.turns}
    for d in found:
        assert d.window_start == max(0, d.index - 8)
        assert d.prompt_ids == chains[d.seq].prompt_ids[d.window_start : d.index + 8].tolist()
        common = d.index - d.window_start
        assert d.held_ids[:common] == d.prompt_ids[:common] and d.held_ids[common] != d.prompt_ids[common]
        assert d.shared_text is not None and "\n" not in d.shared_text + str(d.held_text) + str(d.prompt_text)
    assert "think>↵Run␣the␣failing␣test" in str(found[1].held_text)
    assert class_counts(found) == {"fork": {REASONING_DROPPED: 2}, "realign": {RETOKENIZED: 1}}


def test_without_a_tokenizer_ids_only_and_unclassified(agent: SessionResult) -> None:
    found = divergences(agent, None)
    assert {d.drift_class for d in found} == {UNCLASSIFIED}
    assert all(d.shared_text is d.held_text is d.prompt_text is None for d in found)
    assert divergences(agent, TokenText())[0].as_dict()["class"] == UNCLASSIFIED


def test_the_rebuild_counter_travels_to_workers_and_counts_by_class(agent: SessionResult) -> None:
    counter = pickle.loads(pickle.dumps(DriftClassCounter(SCENARIO_TOKENIZER)))
    assert counter(agent) == {"fork: reasoning dropped": 2, "realign: re-tokenized": 1}


@pytest.mark.slow
def test_rebuild_summary_counts_drift_classes_the_same_for_any_number_of_workers(tmp_path: Path) -> None:


    logs = REPO / "fixtures" / "logs"
    summaries = []
    for workers in ("1", "2"):
        out = tmp_path / f"samples-{workers}.parquet"
        # --batch-mb: small batches, so that two workers really run (the demo log is small).
        args = ["rebuild", str(logs), "--out", str(out), "-j", workers, "--batch-mb", "0.05", "--drift-classes"]
        result = tito(*args)
        assert result.exit_code == 0, result.stderr
        summaries.append(result.stderr.replace(str(out), "OUT"))
    assert summaries[0] == summaries[1]
    lines = {" ".join(line.split()[:-1]): line.split()[-1] for line in summaries[0].splitlines() if line.strip()}
    classes = {k: int(v) for k, v in lines.items() if k.startswith(("fork: ", "realign: "))}
    forks, realigns = int(lines["forks"]), int(lines["realigns"])
    assert sum(n for k, n in classes.items() if k.startswith("fork: ")) == forks
    assert sum(n for k, n in classes.items() if k.startswith("realign: ")) == realigns
    assert classes["fork: reasoning dropped"] and classes["realign: re-tokenized"]
    assert classes["realign: tool-call args re-rendered"]

    # A log whose tokenizer is not found here rebuilds the same, without the classes.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for path in logs.glob("*.parquet"):
        table = pq.read_table(path)
        meta = dict(table.schema.metadata or {})
        if b"tito.tokenizer" in meta:
            meta[b"tito.tokenizer"] = b"no/such/tokenizer"
        pq.write_table(table.replace_schema_metadata(meta), elsewhere / path.name)
    args = ["rebuild", str(elsewhere), "--out", str(tmp_path / "x.parquet"), "--drift-classes"]
    skipped = tito(*args)
    assert skipped.exit_code == 0, skipped.stderr
    assert "fork: " not in skipped.stderr and "realigns" in skipped.stderr
    # Without --drift-classes no tokenizer is looked for, and the summary has no classes.
    plain = tito("rebuild", str(logs), "--out", str(tmp_path / "y.parquet"))
    assert plain.exit_code == 0 and "fork: " not in plain.stderr and "drift class" not in plain.stderr
