"""``captioner bench``: encoder/decoder costs, streaming, accuracy on real speech and the soak (BENCHMARK.md)."""
