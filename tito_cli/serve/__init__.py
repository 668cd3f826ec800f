"""``tito serve``: the capture gateway between agent CLIs and an inference server (docs/serve.md).

    from tito_cli.serve import ServeConfig, create_app
    app = create_app(ServeConfig(logs="logs/", upstream="http://127.0.0.1:30000", tokenizer="Qwen/Qwen3-8B"))

Needs the ``serve`` extra (Starlette, uvicorn, aiohttp, httptools).  The gateway is imported when first named, so that
the ``serve`` command can read :class:`ServeConfig` (its options) without the extra.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .config import ServeConfig

if TYPE_CHECKING:
    from .app import Gateway, create_app

__all__ = ["Gateway", "ServeConfig", "create_app"]


def __getattr__(name: str) -> Any:
    if name in ("Gateway", "create_app"):
        from . import app

        return getattr(app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
