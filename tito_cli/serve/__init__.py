"""``tito serve``: the capture gateway between agent CLIs and an inference server (docs/serve.md).

    from tito_cli.serve import ServeConfig, create_app
    app = create_app(ServeConfig(logs="logs/", upstream="http://127.0.0.1:30000", tokenizer="Qwen/Qwen3-8B"))

Needs the ``serve`` extra (Starlette, uvicorn, aiohttp, httpx).
"""

from __future__ import annotations

from .app import Gateway, create_app
from .config import ServeConfig

__all__ = ["Gateway", "ServeConfig", "create_app"]
