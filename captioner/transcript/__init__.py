"""transcript layer."""
