"""``--unfinished keep|reject``: what the rebuilding commands do with sessions that have no sessions row."""

from __future__ import annotations

from enum import Enum

import typer

__all__ = ["UNFINISHED", "UnfinishedChoice"]


class UnfinishedChoice(Enum):
    keep = "keep"
    reject = "reject"


UNFINISHED = typer.Option(
    UnfinishedChoice.keep,
    "--unfinished",
    help="Sessions with turns but no sessions row (the harness died before finishing them): 'keep' "
    "rebuilds them with reward 0.0 and marks their samples (metadata tito.finished = false); 'reject' "
    "leaves them out and lists them in the rejects report. A crash is not a failed episode.",
)
