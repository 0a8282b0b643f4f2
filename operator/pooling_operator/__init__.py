"""vllm-pooling-operator: vLLM pooling, scoring and hidden-state workloads on Kubernetes."""

__version__ = "0.2.0"

GROUP = "vllm-pooling.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
OPERATOR_IMAGE = f"ghcr.io/vllm-pooling-operator/vllm-pooling-operator:v{__version__}"
# Lists and mappings nested in one another, at most, in anything we accept: ours nest about 15 deep, and the API
# server takes up to 10,000 (which Python's json and copy cannot follow without a raised recursion limit).
MAX_NESTING = 100
