"""Renderers: they build text or rich renderables and never print; the CLI prints them."""
