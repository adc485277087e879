"""kiln.rpc (being written)."""
