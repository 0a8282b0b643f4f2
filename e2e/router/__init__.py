"""vllm-router from its PyPI wheel, for the tests and the benchmarks that run it."""
