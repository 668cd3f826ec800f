"""What a new user meets on the way from the demo to a deployment (issue #41's paper cuts), each said plainly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.cli import tito
from tests.support.helpers import REPO
from tests.support.scenario_logs import scenario_log
from tests.support.serve_checks import page_data
from tests.support.serve_helpers import need_extras
from tito_cli.errors import EXIT_USAGE, TokenizerError
from tito_cli.tokenizer import resolve, shipped_folder

DEMO_LOGS = REPO / "fixtures" / "logs"
UNREACHABLE = "http://127.0.0.1:9"  # a port nothing listens on


def test_shipped_tokenizers_answer_to_their_short_names_and_the_error_lists_them() -> None:
    assert resolve("qwen3") == shipped_folder("fixtures/tokenizers/qwen3")
    assert resolve("small") == shipped_folder("fixtures/tokenizer")
    with pytest.raises(TokenizerError, match=r"tito's shipped tokenizers \(qwen3, small\)"):
        resolve("no-such-tokenizer")


def test_serve_takes_tokenizer_name_equals_path_as_the_other_commands_do() -> None:
    need_extras("starlette", "uvicorn", "httpx")
    from tito_cli.serve.config import ServeConfig
    from tito_cli.serve.run import prepare

    config = ServeConfig(
        logs=Path("unused"), upstream="http://127.0.0.1:9", tokenizer="Qwen/Qwen3-8B=fixtures/tokenizers/qwen3"
    )
    template = prepare(config)
    assert template is not None and template.folder == REPO / "fixtures" / "tokenizers" / "qwen3"
    # The log records the name, and the name is what is sent upstream.
    assert (config.tokenizer_name, config.model_name, template.name) == ("Qwen/Qwen3-8B",) * 3
    help_text = tito("serve", "--help", env={"COLUMNS": "300"}).stdout
    assert "NAME=PATH" in help_text and "shipped name (qwen3, small)" in help_text
    assert "qwen3, deepseek-v3, gpt-oss, llama3, glm45, kimi-k2" in help_text


@pytest.fixture(scope="module")
def agent_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return scenario_log("agent", tmp_path_factory.mktemp("agent") / "logs")


def test_inspect_turns_outside_the_session_says_which_turns_it_has(agent_logs: Path) -> None:
    done = tito("inspect", "s-7f3a-fix-tests", str(agent_logs), "--turns", "500..509", env={"COLUMNS": "300"})
    assert done.exit_code == EXIT_USAGE
    said = " ".join(done.stderr.split())
    assert re.search(r"session s-7f3a-fix-tests has no turn in 500\.\.509: its \d+ turns are seq 0 to \d+", said), said
    assert "no samples" not in said


@pytest.mark.slow
def test_view_says_yes_and_no_counts_in_the_singular_and_filters_unfinished(tmp_path: Path) -> None:
    out = tmp_path / "all.html"
    assert tito("view", "--all", "--logs", str(DEMO_LOGS), "--out", str(out)).exit_code == 0
    page = out.read_text(encoding="utf-8")
    assert '<input type="checkbox" class="flag" value="unfinished"> unfinished' in page
    rows = re.findall(r'<tr data-session="([^"]+)"([^>]*)>(.*?)</tr>', page, re.S)
    unfinished = {sid for sid, attrs, _ in rows if 'data-unfinished="1"' in attrs}
    listed = tito("ls", str(DEMO_LOGS), "--where", "unfinished", "--json").stdout
    assert unfinished == set(re.findall(r'"session": "([^"]+)"', listed)) and len(unfinished) == 1
    cells = {sid: re.findall(r"<td[^>]*>([^<]*)</td>", body) for sid, _, body in rows}
    assert all(("yes" if sid in unfinished else "no") in cells[sid] for sid in cells)
    assert "True" not in " ".join(" ".join(c) for c in cells.values())
    [one] = sorted(unfinished)
    single = tmp_path / "one.html"
    assert tito("view", one, "--logs", str(DEMO_LOGS), "--out", str(single)).exit_code == 0
    text = single.read_text(encoding="utf-8")
    assert "1 of 1 session</span>" in text and "1 sessions" not in text
    assert one in page_data(text)["sessions"]


def test_trl_export_says_it_leaves_out_rewards_and_logprobs(tmp_path: Path) -> None:
    samples = tmp_path / "samples.parquet"
    assert tito("rebuild", str(DEMO_LOGS), "--out", str(samples)).exit_code == 0
    done = tito("export", str(samples), "--to", "trl", "--out", str(tmp_path / "trl.parquet"))
    assert done.exit_code == 0, done.stderr
    assert "not written: rewards and logprobs" in done.stderr
    skyrl = tito("export", str(samples), "--to", "slime", "--out", str(tmp_path / "s.pt"))
    assert "not written" not in skyrl.stderr


@pytest.mark.slow  # tito serve as a process: the option as the command line gives it
@pytest.mark.parametrize(("api", "history"), [("generate", "render"), ("generate", "canonical"), ("chat", "render")])
def test_chat_template_kwargs_from_the_command_line_and_the_request_are_rendered_and_recorded(
    tmp_path: Path, api: str, history: str
) -> None:
    """Qwen3's ``enable_thinking: false`` closes the think block in the generation prompt, whoever renders."""
    need_extras("starlette", "uvicorn", "httpx")
    import httpx

    from tests.support.serve_checks import turns_by_session
    from tests.support.serve_helpers import Gateway
    from tests.support.serve_standin import StandIn, qwen3_output

    no_thinking = "<|im_start|>assistant\n<think>\n\n</think>\n\n"
    logs = tmp_path / "logs"
    extra = ["--chat-template-kwargs", '{"enable_thinking": false}', "--history", history]
    standin = StandIn(lambda conversation: qwen3_output("Hi."))
    with standin, Gateway(standin.url, logs, api=api, extra=extra) as gw:
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        url = f"{gw.url}/sessions/opts-1/v1/chat/completions"
        assert httpx.post(url, json=body, timeout=30).status_code == 200
        own = {**body, "chat_template_kwargs": {"enable_thinking": True}}
        assert httpx.post(url, json=own, timeout=30).status_code == 200
        assert httpx.post(url, json={**body, "chat_template_kwargs": 3}, timeout=30).status_code == 400
        prompts = [standin.decode(entry["prompt_ids"]) for entry in standin.ledger]
        if api == "chat":
            forwarded = [entry["body"].get("chat_template_kwargs") for entry in standin.ledger]
            assert forwarded == [{"enable_thinking": False}, {"enable_thinking": True}]
    assert [p.endswith(no_thinking) for p in prompts] == [True, False]
    turns = turns_by_session(logs)["opts-1"]
    assert [t.metadata["chat_template_kwargs"] for t in turns if t.metadata] == [
        {"enable_thinking": False},
        {"enable_thinking": True},
    ]
    if history == "canonical":
        # A request's own options are rendered whole, and the turn says why.
        assert [t.metadata.get("history_reason") for t in turns if t.metadata] == ["no held turn", "template options"]
    refused = tito("serve", "--logs", tmp_path / "x", "--upstream", UNREACHABLE, "--chat-template-kwargs", "[1]")
    assert refused.exit_code == EXIT_USAGE and "a JSON object is needed, not list" in refused.stderr


def test_every_npm_install_script_is_approved_so_npm_ci_does_not_warn() -> None:
    """npm warns about install scripts allowScripts does not cover; Claude Code's postinstall is needed."""
    import json

    npm = REPO / "tests" / "npm"
    lock = json.loads((npm / "package-lock.json").read_text(encoding="utf-8"))
    packages = lock["packages"].items()
    scripted = {path.rpartition("node_modules/")[2] for path, p in packages if p.get("hasInstallScript")}
    allowed = json.loads((npm / "package.json").read_text(encoding="utf-8")).get("allowScripts", {})
    assert scripted and scripted == {name for name, ok in allowed.items() if ok}


def test_the_readme_says_what_its_test_command_skips_and_why() -> None:
    """The tests that skip without ../shared or torch are the ones the README names."""
    readme = " ".join((REPO / "README.md").read_text(encoding="utf-8").split())
    shared = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "tests").rglob("test_*.py")
        if path.name != Path(__file__).name and "assert_copy_matches_shared(" in path.read_text(encoding="utf-8")
    )
    assert len(shared) == 2
    said = readme.split("The command skips", 1)[1].split("instead of skipping", 1)[0]
    assert all(f"`{name}`" in said for name in shared)
    assert "slime export tests without torch" in said and "`../shared`" in said
