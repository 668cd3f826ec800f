"""Running the algorithm over many sessions: the per-session step, local workers, Ray, the rebuild."""
