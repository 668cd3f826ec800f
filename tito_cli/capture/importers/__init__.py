"""Importers: one module per foreign trace format, each producing turns through the capture writer."""
