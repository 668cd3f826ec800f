"""Options declared once for every command that takes them."""

from __future__ import annotations

import typer

__all__ = ["TOKENIZER"]

TOKENIZER = typer.Option(
    None,
    "--tokenizer",
    metavar="PATH|NAME=PATH",
    help="Where to find the tokenizer: PATH for the one the log records (or to use when it records none), "
    "NAME=PATH for a log that records NAME (repeatable). Without it the recorded name is looked up as a folder "
    "(from the log folder and above, then the working directory), then among tito's shipped tokenizers, then in "
    "the local Hugging Face cache; always offline.",
)
