"""Variants of one ``tito serve`` mode side by side: what each of the gateway's threading choices buys.

    python benchmarks/serve_variants.py threads   [--sessions 32] [--turns 16] [--runs 5]
    python benchmarks/serve_variants.py python | loop | switch | inline | tokenizing

Each set is run by ``serve_peers.peers`` (the same instant upstream, agent-loop workload, CPU per turn read
from outside the process and event-loop lag p99 from inside it, interleaved runs, medians) with tito
gateways that differ in one choice, against the first of the set, which is ``tito serve`` as shipped
(besides CPU per turn and loop lag, the table gives what the clients waited for a turn: the price of a
choice in latency):

* ``threads``: ``--workers`` 1 (the default), 2 and 4 for ``generate`` with each history (the
  worker threads, which render and tokenize; Python work always has one).
* ``python``: the Python work in one thread (as shipped) and in four (``chat`` and ``render``).
* ``loop``: ``chat`` on uvloop (the serve extra installs it) and on asyncio's own loop.
* ``switch``: ``chat`` with the interpreter's switch interval of ``tito serve`` (2 ms), 1 ms and
  Python's default 5 ms.
* ``inline``: ``chat`` with bodies up to 16 KiB (de)serialised on the event loop (as shipped) and up to
  64 KiB (before #38's threading round).
* ``tokenizing``: ``generate --history canonical`` as shipped, and with the tokenizer's work taken away
  (its ``encode`` replaced by a split on spaces: wrong ids, the same turns otherwise) to show what
  tokenizing a turn's new text costs, beside ``chat``.

A variant is a few lines of Python run in the gateway's process before ``tito serve`` (a prelude), so
that the code measured is the shipped code with one thing changed.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from serve_peers import Gateway, peers

CHAT = ["--upstream-api", "chat"]
RENDER = ["--upstream-api", "generate", "--history", "render"]
CANONICAL = ["--upstream-api", "generate", "--history", "canonical"]
#: INLINE_BYTES is imported by name into each module that uses it.
INLINE_64K = (
    "import tito_cli.serve.app, tito_cli.serve.reading, tito_cli.serve.upstreams.base\n"
    "import tito_cli.serve.upstreams.chat, tito_cli.serve.upstreams.generate\n"
    "for module in (tito_cli.serve.app, tito_cli.serve.reading, tito_cli.serve.upstreams.base,\n"
    "               tito_cli.serve.upstreams.chat, tito_cli.serve.upstreams.generate):\n"
    "    module.INLINE_BYTES = 64 << 10\n"
)
#: The Python work in four threads (as before #38's threading round), the tokenizer's as shipped.
PYTHON_4 = (
    "from concurrent.futures import ThreadPoolExecutor\n"
    "import tito_cli.serve.pools as pools\n"
    "shipped = pools.Pools.__init__\n"
    "def four(self, workers):\n"
    "    shipped(self, workers)\n"
    "    self.python = ThreadPoolExecutor(max_workers=4, thread_name_prefix='tito-serve')\n"
    "pools.Pools.__init__ = four\n"
)
NO_TOKENIZING = (
    "import tito_cli.serve.template as template\n"
    "template.ChatTemplate.encode = lambda self, text: [len(word) for word in text.split(' ')]\n"
)

SETS: dict[str, dict[str, Gateway]] = {
    "threads": {
        "render --workers 1": Gateway(RENDER),
        "render --workers 2": Gateway([*RENDER, "--workers", "2"]),
        "render --workers 4": Gateway([*RENDER, "--workers", "4"]),
        "canonical --workers 1": Gateway(CANONICAL),
        "canonical --workers 2": Gateway([*CANONICAL, "--workers", "2"]),
        "canonical --workers 4": Gateway([*CANONICAL, "--workers", "4"]),
    },
    "python": {
        "chat python 1 thread": Gateway(CHAT),
        "chat python 4 threads": Gateway(CHAT, PYTHON_4),
        "render python 1 thread": Gateway(RENDER),
        "render python 4 threads": Gateway(RENDER, PYTHON_4),
    },
    "loop": {
        "chat uvloop": Gateway(CHAT),
        # uvicorn's loop "auto" then takes asyncio's
        "chat asyncio": Gateway(CHAT, "import sys\nsys.modules['uvloop'] = None"),
    },
    "switch": {
        "chat switch 2 ms": Gateway(CHAT),
        "chat switch 1 ms": Gateway(CHAT, "import tito_cli.serve.run\ntito_cli.serve.run.SWITCH_INTERVAL = 0.001"),
        "chat switch 5 ms": Gateway(CHAT, "import tito_cli.serve.run\ntito_cli.serve.run.SWITCH_INTERVAL = 0.005"),
    },
    "inline": {
        "chat inline 16 KiB": Gateway(CHAT),
        "chat inline 64 KiB": Gateway(CHAT, INLINE_64K),
    },
    "tokenizing": {
        "chat": Gateway(CHAT),
        "canonical": Gateway(CANONICAL),
        "canonical no tokenizing": Gateway(CANONICAL, NO_TOKENIZING),
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("set", choices=list(SETS), help="which choice to vary")
    parser.add_argument("--sessions", nargs="+", type=int, default=[32], help="concurrent sessions (default 32)")
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=32_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    args.gateway_option = []
    modes = SETS[args.set]
    with tempfile.TemporaryDirectory(prefix="tito-serve-variants-") as tmp:
        print(peers(args, Path(tmp), modes, reference=next(iter(modes))))


if __name__ == "__main__":
    main()
