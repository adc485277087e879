"""kiln.vm (being written)."""
