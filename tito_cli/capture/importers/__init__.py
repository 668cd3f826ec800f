"""Importers: one module per foreign trace format, each behind :class:`~.base.Importer`.

The formats are one table of ``name -> "module:Class"`` (the plug-in convention,
tito_cli/plugins.py), imported when their format is used.  The driver that records
their sessions through the capture writer is :func:`tito_cli.capture.importing.import_traces`.
"""

from __future__ import annotations

from ...plugins import PluginTable
from .base import Importer

__all__ = ["IMPORTERS", "importer_for", "register_importer"]

#: ``tito import FORMAT`` / ``rebuild --from FORMAT`` -> the importer class.
IMPORTERS: PluginTable[Importer] = PluginTable(
    "import format",
    {
        "openai-exchanges": "tito_cli.capture.importers.openai_exchanges:OpenAIExchangesImporter",
        "rllm": "tito_cli.capture.importers.rllm:RllmImporter",
        "verifiers": "tito_cli.capture.importers.verifiers:VerifiersImporter",
        "atif": "tito_cli.capture.importers.atif:AtifImporter",
        "nemo-gym": "tito_cli.capture.importers.nemo_gym:NemoGymImporter",
        "openenv": "tito_cli.capture.importers.openenv:OpenEnvImporter",
    },
    base=Importer,
)

#: Add an importer: an :class:`~.base.Importer` subclass with ``name``, ``summary`` (and ``Options``).
register_importer = IMPORTERS.register


def importer_for(name: str, options: object = None) -> Importer:
    """The importer of format ``name`` with ``options`` (its ``Options``, a mapping of its fields, or ``None``).

    ``ValueError`` for an unknown format or an option the format does not have.
    """
    return IMPORTERS.get(name)(IMPORTERS.options(name, options))
