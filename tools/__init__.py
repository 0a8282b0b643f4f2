"""Tooling that writes product data, run by hand: ``tools.registry`` reads each vLLM version's model registry into
the operator's tables (operator/pooling_operator/vllm/registry/)."""
