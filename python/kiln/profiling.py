"""kiln.profiling (being written)."""
