"""The output formats: one table of ``name -> "module:Class"`` (the plug-in convention, tito_cli/plugins.py).

    sink = open_sink("slime", out, SinkContext(policy, tokenizer, {"split_by": 4}))

Each format is a :class:`~.base.Sink` subclass in a module of this package,
carrying its ``name``, ``summary`` and ``Options`` dataclass, and one line in
:data:`OUTPUT_FORMATS`; a module is imported only when its format is used or
described.  :func:`register_output_format` adds one from outside the package.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ..errors import ExportError
from ..plugins import PluginTable
from .base import Sink, SinkContext

__all__ = ["OUTPUT_FORMATS", "format_names", "format_options", "open_sink", "register_output_format"]

#: ``--format`` / ``--to`` name -> sink class.  The samples file first, then the trainer formats.
OUTPUT_FORMATS: PluginTable[Sink] = PluginTable(
    "output format",
    {
        "parquet": "tito_cli.export.parquet:SamplesWriter",
        "skyrl": "tito_cli.export.skyrl:SkyRLDataset",
        "slime": "tito_cli.export.slime:RolloutDump",
        "trl": "tito_cli.export.trl:TRLDataset",
    },
    base=Sink,
)

#: Add an output format: a :class:`~.base.Sink` subclass with ``name``, ``summary`` and ``Options``.
register_output_format = OUTPUT_FORMATS.register


def format_names() -> list[str]:
    """The output formats, in table order (nothing is imported)."""
    return OUTPUT_FORMATS.names()


def format_options(name: str, options: object = None) -> Any:
    """Format ``name``'s options as its ``Options`` instance, from ``None`` (the defaults), such an
    instance, or a mapping of its fields; an option of another format is refused, naming it."""
    _known(name)
    try:
        return OUTPUT_FORMATS.options(name, options)
    except ValueError as exc:
        raise ExportError(str(exc)) from None


def open_sink(name: str, out: Path, context: SinkContext) -> Sink:
    """The sink of format ``name``, writing ``out`` (its options checked by :func:`format_options`)."""
    sink_class = _known(name)
    context = dataclasses.replace(context, options=format_options(name, context.options))
    return sink_class(out, context)


def _known(name: str) -> type[Sink]:
    if name not in OUTPUT_FORMATS:
        raise ExportError(f"unknown output format {name!r}", tip=f"one of: {', '.join(format_names())}")
    return OUTPUT_FORMATS.get(name)
