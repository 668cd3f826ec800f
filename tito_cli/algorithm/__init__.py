"""The rebuild algorithm for one session: policy, routing (SPEC §3), linearization (SPEC §4)."""
