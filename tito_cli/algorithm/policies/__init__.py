"""Named policies: one module each."""
