"""``ServeConfig`` checks itself, and the gateway decides the model family once (docs/serve.md).

The settings are checked with plain values, no gateway; the family with the real Qwen3 tokenizer; the
contradictory ``--parser`` through the real ``tito serve`` start-up.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.helpers import REPO
from tests.support.serve_helpers import QWEN3_NAME, need_extras
from tito_cli.families import family_named

need_extras("starlette", "uvicorn", "httpx")

from tito_cli.serve.config import ServeConfig  # noqa: E402
from tito_cli.serve.template import ChatTemplate, decide_family  # noqa: E402
from tito_cli.serve.upstreams.generate import GenerateUpstream  # noqa: E402

QWEN3 = REPO / QWEN3_NAME
URL = "http://127.0.0.1:9"


def config(**settings: Any) -> ServeConfig:
    return ServeConfig(**{"logs": Path("logs"), "upstream": URL, **settings})


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"history": "canonicl"}, "--history must be one of render, canonical, not 'canonicl'"),
        ({"upstream_api": "generat"}, "--upstream-api must be one of generate, chat, not 'generat'"),
        ({"parser": "qwen"}, "--parser must be one of qwen3, "),
        ({"upstream": "127.0.0.1:30000"}, "--upstream '127.0.0.1:30000' is not an http:// or https:// URL"),
        ({"port": 70000}, "--port must be at most 65535"),
        ({"port": -1}, "--port must be a whole number of at least 0"),
        ({"port": "8000"}, "--port must be a whole number"),
        ({"max_request_bytes": 0}, "--max-request-bytes must be a whole number of at least 1"),
        ({"max_tokens_cap": 0}, "--max-tokens-cap must be a whole number of at least 1"),
        ({"max_client_connections": True}, "--max-client-connections must be a whole number"),
        ({"workers": 0}, "--workers must be a whole number of at least 1"),
        ({"upstream_timeout": 0}, "--upstream-timeout must be a finite number of seconds, more than 0"),
        ({"connect_timeout": float("nan")}, "ServeConfig.connect_timeout must be a finite number of seconds"),
        ({"flush_every": float("inf")}, "--flush-every must be a finite number of seconds"),
        ({"grace_period": -1.0}, "--grace-period must be a finite number of seconds, 0 or more"),
        ({"idle_trim": -0.5}, "ServeConfig.idle_trim must be a finite number of seconds, 0 or more"),
        ({"chat_template_kwargs": ["enable_thinking"]}, "--chat-template-kwargs must be a JSON object"),
        ({"chat_template_kwargs": {"when": object()}}, "--chat-template-kwargs must be a JSON object ("),
        ({"chat_template_kwargs": {1: True}}, "--chat-template-kwargs must be a JSON object"),
        ({"allow_origins": ["https://app.example"]}, "--allow-origin must be a tuple of origins"),
        ({"fsync": "yes"}, "--fsync must be true or false"),
        ({"tokenizer": ""}, "--tokenizer must be a non-empty name"),
        ({"model": " "}, "--model must be a non-empty name"),
        ({"host": ""}, "--host must be an address"),
        ({"upstream_api": "chat", "history": "canonical"}, "--history canonical needs --upstream-api generate"),
        ({"upstream_api": "chat", "parser": "qwen3"}, "--parser qwen3 needs --upstream-api generate"),
        ({"upstream_api": "chat", "routed_experts": True}, "--routed-experts needs --upstream-api generate"),
        ({"routed_experts_shape": (48, 0)}, "--routed-experts-shape must be two positive integers"),
        ({"routed_experts_shape": [48, 8]}, "--routed-experts-shape must be two positive integers"),
        ({"routed_experts": 1}, "--routed-experts must be true or false"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_naming_its_option(settings: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError) as refused:
        config(**settings)
    assert named in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_defaults_and_every_accepted_edge_construct() -> None:
    assert config().history == "render"
    edges = config(
        history="canonical",
        parser="llama3",
        port=0,
        grace_period=0,
        idle_trim=0.0,
        upstream_keepalive=0,
        max_tokens_cap=1,
        chat_template_kwargs={"enable_thinking": False},
        allow_origins=("https://app.example",),
        tokenizer="qwen3=/some/folder",
    )
    assert (edges.tokenizer_name, edges.tokenizer_folder) == ("qwen3", "/some/folder")
    assert config(upstream_api="chat", upstream="https://example.test").upstream_api == "chat"


def test_a_library_caller_gets_the_error_tito_serve_gives(tmp_path: Path) -> None:
    import dataclasses

    with pytest.raises(ValueError, match="--history must be one of"):
        ServeConfig(logs=tmp_path, upstream=URL, history="canonicl")
    # A changed copy is checked too: no path around the checks to create_app.
    with pytest.raises(ValueError, match="--upstream-timeout must be a finite number"):
        dataclasses.replace(config(), upstream_timeout=-1.0)
    ran = subprocess.run(
        [sys.executable, "-m", "tito_cli", "serve", "--logs", str(tmp_path / "logs"), "--upstream", URL,
         "--history", "canonicl"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert ran.returncode == 2
    assert ran.stderr.strip() == "ERROR --history must be one of render, canonical, not 'canonicl'"


def test_the_family_is_the_tokenizers_else_the_one_named() -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(QWEN3)
    assert decide_family("anything", tokenizer).name == "qwen3"  # type: ignore[union-attr]
    assert decide_family("anything", tokenizer, "qwen3").name == "qwen3"  # type: ignore[union-attr]
    # A tokenizer nothing recognises: --parser decides; without it there is no family.
    assert decide_family("my-own-model", None, "llama3").name == "llama3"  # type: ignore[union-attr]
    assert decide_family("my-own-model", None) is None
    with pytest.raises(ValueError) as refused:
        decide_family("Qwen/Qwen3-8B", tokenizer, "llama3")
    named = "--parser llama3 contradicts the tokenizer 'Qwen/Qwen3-8B', recognised as qwen3"
    assert str(refused.value).startswith(named)


def test_the_template_parser_and_history_share_one_family_object() -> None:
    settings = config(tokenizer=str(QWEN3), parser="qwen3", history="canonical")
    template = ChatTemplate.configured(settings)
    upstream = GenerateUpstream(settings, None, lambda: template, None)  # type: ignore[arg-type]
    family = template.family
    assert family is not None and family.name == "qwen3"
    assert upstream.profile() is family
    assert upstream.history().end_of_turn == tuple(family.end_of_turn)  # type: ignore[union-attr]
    assert family_named("qwen3").end_of_turn == family.end_of_turn


@pytest.mark.slow
def test_a_parser_that_contradicts_the_tokenizer_stops_start_up_naming_both(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    command = [
        sys.executable, "-m", "tito_cli", "serve", "--logs", str(logs), "--upstream", URL,
        "--tokenizer", QWEN3_NAME, "--parser", "llama3",
    ]  # fmt: skip
    ran = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 2, ran.stderr
    lines = [line for line in ran.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert f"--parser llama3 contradicts the tokenizer {QWEN3_NAME!r}, recognised as qwen3" in lines[0]
    assert not logs.exists()


#: The settings only a library caller gives (``create_app``): tuning a user has no reason to touch.
INTERNAL = {"connect_timeout", "max_connections", "default_max_tokens", "idle_trim"}


def test_every_setting_is_a_serve_option_with_the_dataclass_default() -> None:
    import dataclasses

    import typer

    from tito_cli.cli import _app

    command = typer.main.get_command(_app("serve")).commands["serve"]  # type: ignore[attr-defined]
    options = {param.name: param for param in command.params}
    settings = {f.name: f for f in dataclasses.fields(ServeConfig)}
    assert set(options) == (set(settings) - INTERNAL) | {"log_level"}
    assert all("help" not in settings[name].metadata for name in INTERNAL)
    empty = ServeConfig(logs=Path("logs"), upstream=URL)
    for name, param in options.items():
        if name == "log_level":
            continue
        assert param.help, name
        flag = "--allow-origin" if name == "allow_origins" else "--" + name.replace("_", "-")
        assert param.opts == [flag], name
        if name in ("logs", "upstream"):
            assert param.required, name
        elif name == "allow_origins":
            assert param.multiple and list(param.default) == list(empty.allow_origins) == []
        elif name in ("chat_template_kwargs", "routed_experts_shape"):
            assert param.default is None  # (text on the command line: not given is the field's default)
        else:
            assert param.default == getattr(empty, name), name


def test_options_given_on_the_command_line_reach_the_config(tmp_path: Path) -> None:
    """Every kind of option (text read as JSON or LAYERS,TOPK, repeated, flags, numbers) arrives as the field."""
    import typer

    from tito_cli.cli import _app
    from tito_cli.cli.serve import config_of

    command = typer.main.get_command(_app("serve")).commands["serve"]  # type: ignore[attr-defined]
    args = [
        "--logs", str(tmp_path), "--upstream", URL, "--chat-template-kwargs", '{"enable_thinking": false}',
        "--routed-experts-shape", "2,3", "--allow-origin", "https://a.example", "--allow-origin",
        "https://b.example", "--fsync", "--live-sessions", "7", "--max-tokens-cap", "100", "--workers", "3",
        "--log-level", "info",
    ]  # fmt: skip
    with command.make_context("serve", args) as context:
        params = dict(context.params)
    assert params.pop("log_level") == "info"
    assert config_of(**params) == ServeConfig(
        logs=tmp_path, upstream=URL, chat_template_kwargs={"enable_thinking": False}, routed_experts_shape=(2, 3),
        allow_origins=("https://a.example", "https://b.example"), fsync=True, live_sessions=7, max_tokens_cap=100,
        workers=3,
    )  # fmt: skip
    with command.make_context("serve", ["--logs", str(tmp_path), "--upstream", URL]) as context:
        params = dict(context.params)
    params.pop("log_level")
    assert config_of(**params) == ServeConfig(logs=tmp_path, upstream=URL)
