"""Importers: one module per foreign trace format, each behind :class:`~.base.Importer`.

The driver that records their sessions through the capture writer is
:func:`tito_cli.capture.importing.import_traces`.
"""

from __future__ import annotations

import importlib

from .base import Importer, ImportOptions

__all__ = ["FORMATS", "importer_for"]

#: FORMAT name -> (module, class).  Modules are imported when their format is used.
FORMATS: dict[str, tuple[str, str]] = {
    "openai-exchanges": ("openai_exchanges", "OpenAIExchangesImporter"),
    "rllm": ("rllm", "RllmImporter"),
    "verifiers": ("verifiers", "VerifiersImporter"),
    "atif": ("atif", "AtifImporter"),
    "nemo-gym": ("nemo_gym", "NemoGymImporter"),
}


def importer_for(name: str, options: ImportOptions | None = None) -> Importer:
    """The importer of format ``name`` (a key of :data:`FORMATS`)."""
    try:
        module, cls = FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown import format {name!r}; formats: {', '.join(FORMATS)}") from None
    importer_class: type[Importer] = getattr(importlib.import_module(f".{module}", __name__), cls)
    return importer_class(options)
