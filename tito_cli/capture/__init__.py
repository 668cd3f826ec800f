"""Capture: what a live harness (or an importer) writes — the turn log."""
