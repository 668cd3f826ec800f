"""Where the gateway loads its tokenizer: a ``chat`` upstream's gateway only when ``count_tokens`` first asks.

In-process (Starlette's test client runs the gateway's lifespan); no upstream is called.
"""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from tests.support.helpers import REPO
from tito_cli.serve.app import Gateway
from tito_cli.serve.config import ServeConfig
from tito_cli.serve.run import prepare
from tito_cli.serve.template import ChatTemplate

QWEN3 = REPO / "fixtures" / "tokenizers" / "qwen3"
COUNT = {"model": "m", "messages": [{"role": "user", "content": "How many tokens is this?"}]}


def test_a_chat_gateway_loads_its_tokenizer_on_the_first_count_only(tmp_path: Path) -> None:
    config = ServeConfig(tmp_path / "logs", "http://127.0.0.1:9", upstream_api="chat", tokenizer=str(QWEN3))
    assert prepare(config) is None  # nothing loaded before serving either
    gateway = Gateway(config)
    with TestClient(gateway.app, base_url="http://127.0.0.1") as client:
        assert gateway._template is None
        answer = client.post("/sessions/s1/v1/messages/count_tokens", json=COUNT)
        assert answer.status_code == 200, answer.text
        expected = ChatTemplate(str(QWEN3)).prompt_ids(COUNT["messages"], None)  # type: ignore[arg-type]
        assert answer.json() == {"input_tokens": len(expected)}
        assert gateway._template is not None


def test_a_chat_gateway_whose_tokenizer_cannot_load_says_so_when_asked_to_count(tmp_path: Path) -> None:
    config = ServeConfig(tmp_path / "logs", "http://127.0.0.1:9", upstream_api="chat", tokenizer=str(tmp_path))
    with TestClient(Gateway(config).app, base_url="http://127.0.0.1") as client:
        for _ in range(2):  # the failure is remembered, not retried on every request
            answer = client.post("/sessions/s1/v1/messages/count_tokens", json=COUNT)
            assert answer.status_code == 501
            assert "counting tokens needs the tokenizer" in answer.text and "could not load" in answer.text
            assert str(tmp_path) not in answer.text  # (no filesystem path reaches a client)


def test_a_generate_gateway_loads_its_tokenizer_before_serving(tmp_path: Path) -> None:
    config = ServeConfig(tmp_path / "logs", "http://127.0.0.1:9", upstream_api="generate", tokenizer=str(QWEN3))
    assert isinstance(prepare(config), ChatTemplate)
    gateway = Gateway(config)
    with TestClient(gateway.app):
        assert gateway._template is not None
