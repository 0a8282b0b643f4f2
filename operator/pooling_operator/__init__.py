"""vllm-pooling-operator: vLLM pooling, scoring and hidden-state workloads on Kubernetes."""

def _version() -> str:
    """The one version: pyproject.toml's, as installed (the image, a venv), else read from the source tree."""
    from importlib import metadata
    from pathlib import Path

    try:
        return metadata.version("vllm-pooling-operator")
    except metadata.PackageNotFoundError:
        import tomllib

        pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
        return str(tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]["version"])


__version__ = _version()

GROUP = "vllm-pooling.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
OPERATOR_IMAGE = f"ghcr.io/vllm-pooling-operator/vllm-pooling-operator:v{__version__}"
# Lists and mappings nested in one another, at most, in anything we accept: ours nest about 15 deep, and the API
# server takes up to 10,000 (which Python's json and copy cannot follow without a raised recursion limit).
MAX_NESTING = 100
