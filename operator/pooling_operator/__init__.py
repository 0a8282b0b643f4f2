"""vllm-pooling-operator: vLLM pooling, scoring and hidden-state workloads on Kubernetes."""

__version__ = "0.1.0"

GROUP = "vllm-pooling.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
OPERATOR_IMAGE = f"ghcr.io/vllm-pooling-operator/vllm-pooling-operator:v{__version__}"
