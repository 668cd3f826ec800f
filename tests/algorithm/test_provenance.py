"""Provenance per token (issue #42): weight versions and routed experts through capture, rebuild and export.

The stand-in engine's routing is a function of the prefix alone (``tests/support/provenance_sessions.py``), so
every row of every sample is checked against the sample's own tokens, whatever call computed it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.support.cli import tito
from tests.support.helpers import needs, write_log
from tests.support.provenance_sessions import END, LAYERS, TOPK, Engine, Harness, check_rows, render, reply, routing
from tito_cli.algorithm.policy import Policy
from tito_cli.algorithm.session import SessionResult
from tito_cli.capture.writer import TurnLogWriter
from tito_cli.errors import EXIT_OK, EXIT_REJECTED
from tito_cli.export.samples import session_table
from tito_cli.run.compact import compact
from tito_cli.run.corpus import Corpus
from tito_cli.turns import Reject

SYSTEM = {"role": "system", "content": "you fix bugs"}
USER = {"role": "user", "content": "please fix the parser"}


def _results(log: Path, **knobs: Any) -> dict[str, SessionResult | Reject]:
    corpus = Corpus.open([log])
    policy = Policy.named("slime-v4", **knobs)
    return {r.session_id: r for r in corpus.results(policy)}


def _session(log: Path, session_id: str, **knobs: Any) -> SessionResult:
    result = _results(log, **knobs)[session_id]
    assert isinstance(result, SessionResult), result
    return result


def _turns(*contents: str) -> list[list[dict[str, Any]]]:
    """The prompts of a clean chain: each adds the previous reply and a tool result."""
    prompts = [[SYSTEM, USER]]
    for number, content in enumerate(contents[:-1]):
        prompts.append([*prompts[-1], {"role": "assistant", "content": content}, _tool(number)])
    return prompts


def _tool(number: int) -> dict[str, Any]:
    return {"role": "tool", "content": f"result {number} of the tool"}


REPLIES = ("read the file parser dot py", "edit line twelve of it", "run the tests again now", "done it passes")


def _clean(log: Path, session_id: str = "clean", **writer: Any) -> Harness:
    with TurnLogWriter(log, max_age=None, name="p", **writer) as w:
        harness = Harness(w, session_id)
        for prompt, content in zip(_turns(*REPLIES), REPLIES, strict=True):
            harness.call(prompt, content)
        w.finish_session(session_id, 1.0)
    return harness


def test_clean_append_every_row_is_the_routing_of_its_prefix(tmp_path: Path) -> None:
    _clean(tmp_path)
    result = _session(tmp_path, "clean", routed_experts=True)
    [sample] = result.samples
    assert sample.routed_experts is not None
    check_rows(sample.tokens, sample.routed_experts)


@pytest.mark.parametrize("log_format", [1, 2])
def test_a_turn_stores_only_the_rows_it_adds(tmp_path: Path, log_format: int) -> None:
    # Every call is asked from position 0 (a gateway that never sends a start): the writer still
    # stores each prefix's row once, so the log holds exactly the final sequence's rows.
    with TurnLogWriter(tmp_path, max_age=None, name="p", format=log_format) as w:
        harness = Harness(w, "s")
        for prompt, content in zip(_turns(*REPLIES), REPLIES, strict=True):
            harness.call(prompt, content, start=0)
    table = pq.read_table(tmp_path)
    starts = table.column("routed_experts_start").to_pylist()
    lengths = [len(call) for call in harness.calls]
    assert starts[0] == 0
    # Each later call stores from the previous call's last token (its row comes from this prefill).
    assert starts[1:] == [length - 1 for length in lengths[:-1]]
    stored_rows = sum(n - 1 - s for n, s in zip(lengths, starts, strict=True))
    assert stored_rows == len(harness.calls[-1]) - 1
    stored_bytes = sum(len(b) for b in table.column("routed_experts").to_pylist())
    assert stored_bytes <= 1.5 * 4 * LAYERS * TOPK * stored_rows
    [sample] = _session(tmp_path, "s", routed_experts=True).samples
    assert sample.routed_experts is not None
    check_rows(sample.tokens, sample.routed_experts)


def test_weight_versions_follow_the_trained_tokens(tmp_path: Path) -> None:
    harness = _clean(tmp_path)
    result = _session(tmp_path, "clean")
    [sample] = result.samples
    meta = json.loads(session_table(result).column("metadata")[0].as_py())["tito"]
    # One version per trained turn: the version at the end of its call (the engine changes every 5 tokens).
    assert meta["weight_versions"] == [harness.versions[seq][-1]["version"] for seq in sample.trained_seqs]
    assert len({v for spans in harness.versions.values() for v in (s["version"] for s in spans)}) > 2
    assert any(len(spans) > 1 for spans in harness.versions.values()), "no call spans two versions"
    # Each trained token's version is the one the engine reported for it.
    by_position: dict[int, str] = {}
    for span in meta["weight_version_spans"]:
        for position in range(span["start"], span["end"]):
            by_position[position] = span["version"]
    expected: dict[int, str] = {}
    for span in sample.spans:
        for reported in harness.versions[span.turn.seq]:
            for index in range(reported["start"], reported["end"]):
                expected[span.start + index] = reported["version"]
    mask = np.flatnonzero(sample.loss_mask) + sample.first_prompt_length
    assert by_position == {int(p): expected[int(p)] for p in mask}


def test_realign_takes_the_retokenized_prompts_rows(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        harness = Harness(w, "r")
        first = [SYSTEM, USER]
        harness.call(first, "read the file")
        second = [*first, {"role": "assistant", "content": "read the file"}, _tool(0)]
        ids = render(second)
        # The harness re-tokenized the reply: its last word comes back as another id (a realign).
        drift = len(render(first)) + 2
        ids[drift] = 77
        harness.call(second, "edit it now", prompt_ids=ids)
    result = _session(tmp_path, "r", routed_experts=True)
    assert result.report.realigns == 1
    [sample] = result.samples
    assert sample.routed_experts is not None
    assert sample.tokens[drift] == 77
    check_rows(sample.tokens, sample.routed_experts)


def test_areno_524_rows_start_from_the_shared_prefix_not_the_previous_row_count(tmp_path: Path) -> None:
    # AReno #524 appended the new call's rows after the rows it held (the previous call's row count).
    # After a realign the shared prefix is shorter than that: the new rows begin at the drift, and the
    # held rows past it belong to a prefix the sample does not have.
    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        harness = Harness(w, "a")
        first = [SYSTEM, USER]
        harness.call(first, "read the whole file parser dot py")
        second = [*first, {"role": "assistant", "content": "read the whole file parser dot py"}, _tool(0)]
        ids = render(second)
        drift = len(render(first)) + 1
        ids[drift : drift + 3] = [71, 72, 73]
        start = harness.held_start([*ids, *reply("ok")])
        assert start == drift
        harness.call(second, "ok", prompt_ids=ids)
    [sample] = _session(tmp_path, "a", routed_experts=True).samples
    assert sample.routed_experts is not None
    check_rows(sample.tokens, sample.routed_experts)
    held = len(render(first)) + len(reply("read the whole file parser dot py")) - 1
    # The misaligned assembly keeps the first call's rows up to its row count: wrong from the drift on.
    assert not np.array_equal(routing(harness.calls[0][: drift + 1]), sample.routed_experts[drift])
    assert held > drift


def test_fork_sub_agent_and_retry(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        harness = Harness(w, "f")
        first = [SYSTEM, USER]
        harness.call(first, "look around")
        # A sub-agent's calls come between two of its parent's.
        sub = [{"role": "system", "content": "you search code"}, {"role": "user", "content": "find parse"}]
        harness.call(sub, "found it in parser dot py")
        harness.call([*sub, {"role": "assistant", "content": "found it in parser dot py"}, _tool(9)], "done")
        second = [*first, {"role": "assistant", "content": "look around"}, _tool(0)]
        harness.call(second, "edit the parser")
        harness.call(second, "edit the lexer instead")  # a retry of the same prompt
        # A fork: the prompt differs in the first prompt's region (a re-rendered system message).
        third = [*second, {"role": "assistant", "content": "edit the lexer instead"}, _tool(1)]
        ids = render(third)
        ids[1] = 55
        harness.call(third, "all good", prompt_ids=ids)
    result = _session(tmp_path, "f", routed_experts=True)
    assert result.report.fork_total >= 1
    assert len(result.samples) >= 4
    for sample in result.samples:
        assert sample.routed_experts is not None
        check_rows(sample.tokens, sample.routed_experts)


def test_rewrite_of_an_earlier_reply(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        harness = Harness(w, "w")
        first = [SYSTEM, USER]
        harness.call(first, "read the file now")
        # The harness rewrote the reply in its history (a trimmed message): a new branch of the tree.
        second = [*first, {"role": "assistant", "content": "read the file"}, _tool(0)]
        harness.call(second, "edit it")
    result = _session(tmp_path, "w", routed_experts=True)
    assert result.samples
    for sample in result.samples:
        assert sample.routed_experts is not None
        check_rows(sample.tokens, sample.routed_experts)


def test_a_row_never_computed_rejects_the_sample_only(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        good = Harness(w, "g")
        good.call([SYSTEM, USER], "fine")
        harness = Harness(w, "m")
        first = [SYSTEM, USER]
        harness.call(first, "read the file")
        # A sub-agent branch asked with a start past what the session holds.  Its first two tokens
        # (the system role and "you") are the first call's: their rows hold; rows [2, 7) were never computed.
        sub = [{"role": "system", "content": "you search code"}, {"role": "user", "content": "find it"}]
        harness.call(sub, "found", start=7)
        w.finish_session("m", 1.0)
        w.finish_session("g", 1.0)
    result = _session(tmp_path, "m", routed_experts=True)
    assert len(result.samples) == 1
    [reason] = result.report.rejected_samples
    assert "token 2 with this sample's prefix" in reason
    assert "(5 of " in reason

    out = tmp_path.parent / f"{tmp_path.name}-out.parquet"
    run = tito("rebuild", str(tmp_path), "-o", str(out), "--routed-experts")
    assert run.exit_code == EXIT_REJECTED, run.output
    rejects = [json.loads(line) for line in out.with_name(out.name + ".rejects.jsonl").read_text().splitlines()]
    assert [r["session_id"] for r in rejects] == ["m"]
    assert rejects[0]["reason"].startswith("sample 1 (leaf 1, segment 0): no call of the session computed")
    table = pq.read_table(out)
    assert table.column("session_id").to_pylist() == ["g", "m"]
    for row in table.to_pylist():
        rows = np.array(row["routed_experts"], dtype=np.int32).reshape(row["routed_experts_shape"])
        check_rows(np.array(row["tokens"]), rows)


def test_start_offsets_complete_from_earlier_calls(tmp_path: Path) -> None:
    # A start inside the held prefix (not at its end) re-sends rows the session holds: stored once.
    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        harness = Harness(w, "o")
        prompts = _turns(*REPLIES[:2])
        harness.call(prompts[0], REPLIES[0])
        harness.call(prompts[1], REPLIES[1], start=3)
    starts = pq.read_table(tmp_path).column("routed_experts_start").to_pylist()
    assert starts == [0, len(harness.calls[0]) - 1]
    [sample] = _session(tmp_path, "o", routed_experts=True).samples
    assert sample.routed_experts is not None
    check_rows(sample.tokens, sample.routed_experts)


def test_exclude_auxiliary_drops_side_calls(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        harness = Harness(w, "x")
        harness.call([SYSTEM, USER], "fix it", call_kind="agent")
        harness.call([{"role": "user", "content": "write a title for this chat"}], "parser fix", call_kind="auxiliary")
    kept = _session(tmp_path, "x")
    dropped = _session(tmp_path, "x", exclude_auxiliary=True)
    assert kept.report.auxiliary_calls == dropped.report.auxiliary_calls == 1
    assert len(kept.samples) == 2 and len(dropped.samples) == 1
    assert dropped.samples[0].seqs == [0]


def test_a_log_without_provenance_reads_as_before(tmp_path: Path) -> None:
    turn = {
        "session_id": "plain",
        "prompt_ids": render([SYSTEM, USER]),
        "output_ids": reply("ok"),
        "prompt_messages": [SYSTEM, USER],
        "response_message": {"role": "assistant", "content": "ok"},
    }
    write_log(tmp_path, [turn], [{"session_id": "plain", "reward": 1.0}])
    table = pq.read_table(tmp_path / "turns-test-000001.parquet")
    assert "routed_experts" not in table.column_names and "weight_versions" not in table.column_names
    result = _session(tmp_path, "plain")
    meta = json.loads(session_table(result).column("metadata")[0].as_py())["tito"]
    assert "weight_versions" not in meta
    assert "routed_experts" not in session_table(result).column_names
    missing = _session(tmp_path, "plain", routed_experts=True)
    assert not missing.samples
    assert "token 0 " in missing.report.rejected_samples[0]


@pytest.mark.parametrize("target_format", [1, 2])
def test_compact_carries_provenance(tmp_path: Path, target_format: int) -> None:
    log = tmp_path / "log"
    _clean(log)
    out = tmp_path / "compacted"
    compact([log], out, format=target_format)
    before = _session(log, "clean", routed_experts=True)
    after = _session(out, "clean", routed_experts=True)
    a, b = before.samples[0], after.samples[0]
    assert a.routed_experts is not None and b.routed_experts is not None
    assert np.array_equal(a.routed_experts, b.routed_experts)
    assert session_table(before).column("metadata").equals(session_table(after).column("metadata"))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"weight_versions": [{"version": "v1", "start": 0, "end": 9}]}, "within the 2 output tokens"),
        (
            {"weight_versions": [{"version": "a", "start": 0, "end": 2}, {"version": "b", "start": 1, "end": 2}]},
            "before the previous one ends",
        ),
        ({"routed_experts": np.zeros((3, LAYERS, TOPK), dtype=np.int32)}, "need 8"),
        ({"routed_experts": np.zeros((8, LAYERS), dtype=np.int32)}, "[rows, layers, topk]"),
        ({"call_kind": "title"}, "call_kind must be one of agent, auxiliary"),
        ({"sampling": [1, 2]}, "sampling is not a JSON object"),
    ],
)
def test_the_writer_refuses_provenance_that_breaks_the_contract(
    tmp_path: Path, arguments: dict[str, Any], message: str
) -> None:
    with TurnLogWriter(tmp_path, max_age=None) as w:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            w.record_turn("s", [1, 2, 3, 4, 5, 6, 7], [8, END], None, "stop", [USER], None, **arguments)
        assert w.record_turn("s", [1, 2, 3, 4, 5, 6, 7], [8, END], None, "stop", [USER], None) == 0


def test_rows_of_another_shape_in_one_session_are_refused(tmp_path: Path) -> None:
    with TurnLogWriter(tmp_path, max_age=None) as w:
        w.record_turn("s", [1, 2], [3], None, "stop", [USER], None, routed_experts=np.zeros((2, 2, 2), int))
        with pytest.raises(ValueError, match="earlier calls of session 's' have 2 x 2"):
            w.record_turn("s", [1, 2], [4], None, "stop", [USER], None, routed_experts=np.zeros((2, 3, 2), int))


def test_the_reader_rejects_a_session_with_broken_provenance(tmp_path: Path) -> None:
    import pyarrow as pa

    with TurnLogWriter(tmp_path, max_age=None, name="p") as w:
        Harness(w, "bad", engine=Engine()).call([SYSTEM, USER], "fine")
        Harness(w, "ok", engine=Engine()).call([SYSTEM, USER], "fine")
    path = tmp_path / "turns-p-000001.parquet"
    table = pq.read_table(path)
    spans = table.column("weight_versions").to_pylist()
    spans[0] = json.dumps([{"version": "v0", "start": 0, "end": 99}])
    table = table.set_column(table.schema.get_field_index("weight_versions"), "weight_versions", pa.array(spans))
    pq.write_table(table, path)
    results = _results(tmp_path)
    assert isinstance(results["bad"], Reject) and "within the 2 output tokens" in results["bad"].reason
    assert isinstance(results["ok"], SessionResult)


def test_rebuild_cli_writes_routed_experts_and_exits_ok(tmp_path: Path) -> None:
    log = tmp_path / "log"
    _clean(log)
    out = tmp_path / "samples.parquet"
    run = tito("rebuild", str(log), "-o", str(out), "--routed-experts", "-j", "1")
    assert run.exit_code == EXIT_OK, run.output
    [row] = pq.read_table(out).to_pylist()
    assert row["routed_experts_shape"] == [len(row["tokens"]) - 1, LAYERS, TOPK]
    check_rows(np.array(row["tokens"]), np.array(row["routed_experts"]).reshape(row["routed_experts_shape"]))


# -- slime v0.3.1's routed-experts handling, as its training path applies it to a loaded dump ----------------
# (slime/ray/rollout.py _convert_samples_to_train_data and _cpu_tensor; slime/backends/megatron_utils/cp_utils.py
# prepare_routed_experts_for_routing_replay and _pad_routed_experts), written again here after its source.


def _slime_cpu_tensor(value: Any) -> Any:
    import torch

    if isinstance(value, np.ndarray) and not value.flags.writeable:
        value = value.copy()
    return torch.as_tensor(value).detach().cpu().contiguous()


def _slime_pad_routed_experts(experts: Any, pad: int, num_experts: int) -> Any:
    import torch

    if pad == 0:
        return experts
    _, num_layers, topk = experts.shape
    padding = torch.arange(pad * num_layers * topk, dtype=experts.dtype).reshape((pad, num_layers, topk)) % num_experts
    return torch.cat([experts, padding], dim=0)


def _slime_routing_replay_rows(samples: list[dict[str, Any]], num_experts: int) -> Any:
    """The routed experts slime's Megatron actor replays for these samples (tensor parallel 1, no CP)."""
    import torch

    assert samples[0]["rollout_routed_experts"] is not None  # slime takes them when the first sample has them
    experts = [_slime_cpu_tensor(s["rollout_routed_experts"]) for s in samples]
    tokens = [torch.as_tensor(s["tokens"], dtype=torch.long) for s in samples]
    for rows, ids in zip(experts, tokens, strict=True):
        assert rows.shape[0] == ids.shape[0] - 1, f"{rows.shape}, {ids.shape}"
    padded = [_slime_pad_routed_experts(rows, 1, num_experts) for rows in experts]
    return torch.cat(padded, dim=0)


def test_slime_dump_carries_routed_experts_and_weight_versions_slime_accepts(tmp_path: Path) -> None:
    torch = needs("torch", "slime")

    log = tmp_path / "log"
    harness = _clean(log)
    with TurnLogWriter(log, max_age=None, name="q") as w:
        other = Harness(w, "other", engine=Engine(version_every=3))
        other.call([SYSTEM, USER], "one short reply")
        w.finish_session("other", 0.5)
    out = tmp_path / "dump.pt"
    run = tito("rebuild", str(log), "-o", str(out), "--format", "slime", "--routed-experts", "-j", "1")
    assert run.exit_code == EXIT_OK, run.output
    payload = torch.load(out, weights_only=False)
    samples = payload["samples"]
    assert [s["session_id"] for s in samples] == ["clean", "other"]
    replayed = _slime_routing_replay_rows(samples, num_experts=64)
    assert replayed.shape == (sum(len(s["tokens"]) for s in samples), LAYERS, TOPK)
    for sample in samples:
        assert sample["rollout_routed_experts"].dtype == torch.int32
        check_rows(np.array(sample["tokens"]), sample["rollout_routed_experts"].numpy())
        assert all(isinstance(v, str) for v in sample["weight_versions"])
    clean = samples[0]
    assert clean["weight_versions"] == [
        harness.versions[seq][-1]["version"] for seq in clean["metadata"]["tito"]["trained_turns"]
    ]


# -- views ----------------------------------------------------------------------------------------------------


def _mixed_log(log: Path) -> None:
    """A session with versions changing mid-call, an auxiliary call, and a call whose rows were never computed."""
    with TurnLogWriter(log, max_age=None, name="v") as w:
        harness = Harness(w, "mixed", engine=Engine(version_every=4))
        prompts = _turns(*REPLIES[:2])
        harness.call(prompts[0], REPLIES[0], call_kind="agent")
        harness.call([{"role": "user", "content": "title please"}], "parser fix", call_kind="auxiliary", start=2)
        harness.call(prompts[1], REPLIES[1], call_kind="agent")
        w.finish_session("mixed", 1.0)


def _cli(*args: str) -> tuple[int, str]:
    result = tito(*list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})
    return result.exit_code, result.stdout


def test_inspect_shows_versions_call_kind_and_routed_experts(tmp_path: Path) -> None:
    _mixed_log(tmp_path)
    code, out = _cli("inspect", "mixed", "--logs", str(tmp_path), "--view", "turns", "--json")
    assert code == EXIT_OK, out
    facts = json.loads(out)
    rows = {row["seq"]: row for row in facts["turns"]}
    assert rows[0]["call_kind"] == "agent" and rows[1]["call_kind"] == "auxiliary"
    assert len(set(rows[0]["versions"])) > 1  # a call spanning two versions
    assert rows[0]["routed_experts"] == rows[2]["routed_experts"] == "complete"
    # The title call shares no token with the others, and was asked for its rows from position 2 on.
    assert rows[1]["routed_experts"] == "missing from token 0"
    assert facts["session"]["auxiliary_calls"] == 1
    # Both samples (the main line's and the title call's) were trained on two versions.
    assert facts["session"]["stale_samples"] == 2
    code, out = _cli("inspect", "mixed", "--logs", str(tmp_path), "--view", "turns")
    assert code == EXIT_OK, out
    assert "auxiliary" in out and "missing from token 0" in out and " → " in out


def test_ls_and_stats_count_stale_samples_and_auxiliary_calls(tmp_path: Path) -> None:
    _mixed_log(tmp_path)
    _clean(tmp_path / "more", session_id="plain-versions")
    code, out = _cli("ls", str(tmp_path), "--json")
    assert code == EXIT_OK, out
    rows = {row["session"]: row for row in json.loads(out)}
    assert (rows["mixed"]["stale"], rows["mixed"]["auxiliary"]) == (2, 1)
    assert (rows["plain-versions"]["stale"], rows["plain-versions"]["auxiliary"]) == (1, 0)
    code, out = _cli("stats", str(tmp_path), "--json")
    assert code == EXIT_OK, out
    assert json.loads(out)["provenance"] == {"turns": 7, "auxiliary_calls": 1, "stale_samples": 3}
    code, out = _cli("stats", str(tmp_path))
    assert "auxiliary calls" in out and "stale samples" in out


def test_view_page_carries_each_turns_provenance(tmp_path: Path) -> None:
    _mixed_log(tmp_path / "log")
    out = tmp_path / "page.html"
    code, _ = _cli("view", "--all", "--logs", str(tmp_path / "log"), "--out", str(out))
    assert code == EXIT_OK
    page = out.read_text(encoding="utf-8")
    found = re.search(r'<script type="application/json" id="tito-data">(.*?)</script>', page, re.S)
    assert found is not None
    session = json.loads(found[1])["sessions"]["mixed"]
    rows = {row["seq"]: row for row in session["turns"]}
    assert rows[1]["call_kind"] == "auxiliary" and rows[1]["routed_experts"] == "missing from token 0"
    assert len(set(rows[0]["versions"])) == 2
    assert "provenanceCells" in page  # the page's script shows them


# -- the simulator's sessions (realigns, forks, sub-agents, compaction, retries) ------------------------------


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    from tito_cli.simulate import simulate

    folder = tmp_path_factory.mktemp("simulated")
    simulate(folder / "with", 10, 3, provenance=True)
    simulate(folder / "without", 10, 3)
    return folder / "with", folder / "without"


def test_simulated_sessions_every_row_of_every_sample_is_its_prefixs(simulated: tuple[Path, Path]) -> None:
    from tito_cli.simulate.provenance import routing_rows

    log, _ = simulated
    results = _results(log, routed_experts=True)
    samples = 0
    for result in results.values():
        assert isinstance(result, SessionResult), result
        assert result.report.rejected_samples == ()
        for sample in result.samples:
            assert sample.routed_experts is not None
            assert np.array_equal(sample.routed_experts, routing_rows(sample.tokens, 0, len(sample.tokens) - 1))
            samples += 1
    reports = [r.report for r in results.values() if isinstance(r, SessionResult)]
    assert samples > len(results)  # forks: sessions of several samples
    assert sum(r.realigns for r in reports) and sum(r.fork_total for r in reports)
    assert sum(r.stale_samples for r in reports)


def test_simulated_provenance_changes_no_sample(simulated: tuple[Path, Path]) -> None:
    log, plain = simulated
    with_, without = _results(log), _results(plain)
    assert with_.keys() == without.keys()
    for sid, result in with_.items():
        other = without[sid]
        assert isinstance(result, SessionResult) and isinstance(other, SessionResult)
        a, b = session_table(result), session_table(other)
        for column in ("tokens", "loss_mask", "rollout_log_probs", "reward"):
            assert a.column(column).equals(b.column(column))
        for x, y in zip(a.column("metadata").to_pylist(), b.column("metadata").to_pylist(), strict=True):
            mx, my = json.loads(x), json.loads(y)
            assert "weight_versions" in mx["tito"] and "weight_versions" not in my["tito"]
            del mx["tito"]["weight_versions"], mx["tito"]["weight_version_spans"]
            assert mx == my


def test_routed_experts_through_worker_processes_and_export(simulated: tuple[Path, Path], tmp_path: Path) -> None:
    # Two workers and many batches: the rows travel through the handoff files in order, byte for byte.
    from tito_cli.run.rebuild import rebuild

    log, _ = simulated
    policy = Policy.named("slime-v4", routed_experts=True)
    one = rebuild([log], tmp_path / "one.parquet", policy, workers=1)
    two = rebuild([log], tmp_path / "two.parquet", policy, workers=2, batch_bytes=0)
    assert not one.rejected and not two.rejected
    assert (tmp_path / "one.parquet").read_bytes() == (tmp_path / "two.parquet").read_bytes()
    torch = needs("torch", "slime")  # the slime export writes with torch.save
    code, out = _cli("export", str(tmp_path / "one.parquet"), "--to", "slime", "--out", str(tmp_path / "r.pt"))
    assert code == EXIT_OK, out
    samples = torch.load(tmp_path / "r.pt", weights_only=False)["samples"]
    table = pq.read_table(tmp_path / "one.parquet")
    assert len(samples) == table.num_rows
    for sample, row in zip(samples, table.to_pylist(), strict=True):
        assert sample["rollout_routed_experts"].shape == tuple(row["routed_experts_shape"])
        assert sample["rollout_routed_experts"].flatten().tolist() == row["routed_experts"]
        assert sample["weight_versions"] == json.loads(row["metadata"])["tito"]["weight_versions"]


def test_rows_that_do_not_decompress_reject_their_session_when_used(tmp_path: Path) -> None:
    import pyarrow as pa

    log = tmp_path / "log"
    with TurnLogWriter(log, max_age=None, name="p") as w:
        Harness(w, "bad").call([SYSTEM, USER], "fine")
        Harness(w, "ok").call([SYSTEM, USER], "fine")
    path = log / "turns-p-000001.parquet"
    table = pq.read_table(path)
    assert table.column("session_id").to_pylist() == ["bad", "ok"]
    blobs = table.column("routed_experts").to_pylist()
    blobs[0] = blobs[0][: len(blobs[0]) // 2]  # truncated
    column = table.schema.get_field_index("routed_experts")
    pq.write_table(table.set_column(column, "routed_experts", pa.array(blobs, pa.large_binary())), path)
    assert isinstance(_results(log)["bad"], SessionResult)  # the rows are not needed
    results = _results(log, routed_experts=True)
    bad = results["bad"]
    assert isinstance(bad, Reject) and bad.row == 0 and "seq 0: routed_experts does not decompress" in bad.reason
    assert isinstance(results["ok"], SessionResult)
    summary = compact([log], tmp_path / "compacted")
    assert [r.session_id for r in summary.carried] == ["bad"]


def test_a_forgotten_session_stores_more_rows_never_a_wrong_one(tmp_path: Path) -> None:
    # One open session at a time: interleaved sessions forget each other, and each call stores the rows
    # it was given (from its start) again; the samples are the same.
    with TurnLogWriter(tmp_path, max_age=None, name="p", max_open_sessions=1) as w:
        a, b = Harness(w, "a"), Harness(w, "b")
        prompts = _turns(*REPLIES)
        for prompt, content in zip(prompts, REPLIES, strict=True):
            a.call(prompt, content)
            b.call(prompt, content)
    table = pq.read_table(tmp_path)
    starts = dict(zip(zip(table.column("session_id").to_pylist(), table.column("seq").to_pylist(), strict=True),
                      table.column("routed_experts_start").to_pylist(), strict=True))
    # The harness asked from the held prefix: nothing to drop, and nothing dropped wrongly.
    assert starts[("a", 1)] == len(a.calls[0]) - 1
    for sid in ("a", "b"):
        [sample] = _session(tmp_path, sid, routed_experts=True).samples
        assert sample.routed_experts is not None
        check_rows(sample.tokens, sample.routed_experts)
    with TurnLogWriter(tmp_path / "whole", max_age=None, name="p", max_open_sessions=1) as w:
        a, b = Harness(w, "a"), Harness(w, "b")
        for prompt, content in zip(prompts, REPLIES, strict=True):
            a.call(prompt, content, start=0)
            b.call(prompt, content, start=0)
    starts_whole = pq.read_table(tmp_path / "whole").column("routed_experts_start").to_pylist()
    assert starts_whole == [0] * 2 * len(REPLIES)  # forgotten each time: stored whole
    for sid in ("a", "b"):
        [sample] = _session(tmp_path / "whole", sid, routed_experts=True).samples
        assert sample.routed_experts is not None
        check_rows(sample.tokens, sample.routed_experts)
