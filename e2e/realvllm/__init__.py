"""Real vLLM in the loop: the CPU vLLM 0.32 runtime (``runtime``), the small models it serves here
(``tiny_models``, ``built``), the answers it must agree with (``oracles``) and vLLM's own argument parser
(``vllm_parse``). The pod runner that starts it is ``e2e.podrunner`` (the map: e2e/__init__.py)."""
