"""``captioner bench``: encoder/decoder costs, streaming, accuracy on real speech and the soak (BENCHMARK.md);
and the measurement behind ``captioner models choose`` (:mod:`captioner.bench.model_choice`)."""
