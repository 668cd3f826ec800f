"""``tito demo-upstream``."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import typer

from .app import app, exit_codes_help, guarded


@app.command(
    "demo-upstream",
    help="Run a demo inference server without a GPU, to try tito serve with the real agent CLIs: it answers "
    "SGLang's native /generate and vLLM's /v1/chat/completions (return_token_ids) through the real tokenizer, "
    "playing a scripted Qwen3 agent that, asked to \"Create a file named NAME containing 'TEXT'\", writes "
    "it with the client's shell tool, reads it back and answers (docs/serve.md). Serves until SIGTERM or "
    "Ctrl-C.\n\n" + exit_codes_help(),
)
@guarded
def demo_upstream(
    port: int = typer.Option(30000, "--port", help="The port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="The address to bind."),
    tokenizer: str = typer.Option(
        "qwen3", "--tokenizer", help="A Qwen3 tokenizer (shipped name, folder or cached hub id) to generate with."
    ),
    model: str = typer.Option("tito-demo", "--model", help="The model name /v1/models lists."),
) -> None:
    from ..families import family_for
    from ..serve.demo import DemoUpstream, demo_agent
    from ..tokenizer import load, resolve

    loaded = load(resolve(tokenizer))
    family = family_for(tokenizer, loaded)
    if family is None or family.name != "qwen3":
        raise typer.BadParameter(
            f"the demo model writes Qwen3's markers, and {tokenizer!r} is not a Qwen3 tokenizer",
            param_hint="--tokenizer",
        )
    try:
        server = DemoUpstream(demo_agent, loaded, model=model, host=host, port=port)
    except OSError as exc:
        raise typer.BadParameter(f"cannot listen on {host}:{port} ({exc.strerror})", param_hint="--port") from None
    stop = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    with server:
        print(f"demo upstream on {server.url} (/generate, /v1/chat/completions); Ctrl-C stops it", file=sys.stderr)
        while not stop.wait(0.5):
            pass
