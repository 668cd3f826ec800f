"""``tito serve`` in the test's own process: the app under uvicorn in a thread, on a free 127.0.0.1 port.

``InProcessGateway(upstream_url, logs, api=..., **settings)`` has the subprocess ``Gateway``'s surface
(``url``, ``logs``, ``terminate()``, ``output()``; a context manager), so the real SDKs and CLIs talk
to it over HTTP as to ``tito serve``; it starts the way the command does (``serve.run.prepare``: the
options checked, the family decided, the tokenizer loaded; the recorder opened; uvicorn with the
command's HTTP protocol), without a new interpreter importing everything again. ``settings`` are ``ServeConfig`` fields
(``flush_every=0.2``, ``history="canonical"``, ``parser="qwen3"``). On exit uvicorn stops, and the app's
shutdown writes every journaled turn and closes the log, as on SIGTERM. What needs a real process
(signals, kills, two gateways on one folder, start-up exit statuses) keeps the subprocess ``Gateway``.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from tests.support.helpers import REPO
from tests.support.serve_helpers import QWEN3_NAME

__all__ = ["InProcessGateway"]


class InProcessGateway:
    """The gateway app served by uvicorn in a thread of this process; ``url`` is its base URL."""

    def __init__(
        self,
        upstream: str,
        logs: str | os.PathLike[str],
        *,
        api: str = "generate",
        tokenizer: str | None = QWEN3_NAME,
        startup_timeout: float = 60.0,
        stop_timeout: float = 60.0,
        **settings: Any,
    ) -> None:
        from tito_cli.serve.config import ServeConfig

        if tokenizer is not None and not Path(tokenizer).exists() and (REPO / tokenizer).exists():
            tokenizer = str(REPO / tokenizer)  # the subprocess gateway runs in the checkout
        self.logs = Path(logs)
        self.config = ServeConfig(
            logs=self.logs, upstream=upstream, upstream_api=api, tokenizer=tokenizer, port=0, **settings
        )
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def __enter__(self) -> InProcessGateway:
        import uvicorn

        from tito_cli.serve.app import Gateway
        from tito_cli.serve.connections import protocol_class
        from tito_cli.serve.run import listen, prepare

        config = self.config
        template = prepare(config)
        sock = listen("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self.gateway = Gateway(config, template)
        self.gateway.recorder.open()
        self._server = uvicorn.Server(
            uvicorn.Config(
                self.gateway.app,
                log_level="warning",
                access_log=False,
                timeout_graceful_shutdown=int(config.grace_period),
                lifespan="on",
                timeout_keep_alive=max(1, round(config.client_idle_timeout)),
                http=protocol_class(config),
            )
        )
        self._thread = threading.Thread(
            target=self._serve, args=(sock,), name=f"tito-serve-{self.url}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._stop()
                raise RuntimeError(f"the in-process gateway did not start in {self.startup_timeout} s") from self._error
            time.sleep(0.01)
        return self

    def _serve(self, sock: Any) -> None:
        try:
            self._server.run(sockets=[sock])
        except BaseException as exc:  # reported by __enter__ or __exit__
            self._error = exc
        finally:
            sock.close()

    def _stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(self.stop_timeout)
            assert not self._thread.is_alive(), "the in-process gateway did not stop"
            self._thread = None
            if self._error is not None:
                raise RuntimeError("the in-process gateway failed") from self._error

    def terminate(self) -> int:
        """Stop as on SIGTERM (in-flight requests finish, the log is written and closed); the exit status
        ``tito serve`` would have: 0, or 5 when answered turns could not be written."""
        self._stop()
        return 5 if self.gateway.recorder.unwritten is not None else 0

    def output(self) -> str:
        """What went wrong in the server thread (the subprocess gateway's stderr, as far as there is one)."""
        return repr(self._error) if self._error is not None else ""

    def __exit__(self, *exc: Any) -> None:
        self._stop()
