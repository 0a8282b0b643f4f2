"""A service's compile cache on a volume (`engine.compileCache`), pure: the key of its entry and the two
containers that move it (pods/compile_cache/store.py does the moving).

The key is a hash of everything that makes a compiled graph another one: the image (it pins vLLM, torch and
Triton), the contract version, the device (the GPU product, or `cpu` without a GPU), the model and its
revision, vLLM's argv without what only names or places the server (--host, --port, --served-model-name), and
the literal env the user adds. vLLM keys its own artifacts inside (VLLM_CACHE_ROOT/torch_compile_cache/<hash>
of its config, code and compiler: compilation/backends.py:1040-1077); the operator's key keeps services,
devices and images apart on one claim, and is what a pod restores and saves as a whole.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pooling_operator.api.gpu import ResourcesSpec
from pooling_operator.builders.common import CONTAINER_SECURITY
from pooling_operator.vllm.args import CACHE_MOUNT
from pooling_operator.vllm.workload import Workload

COMPILE_CACHE_MOUNT = "/compile-cache"
VOLUME = "compile-cache"
_PLACE_ONLY = {"--host", "--port", "--served-model-name"}


def device(resources: ResourcesSpec | None) -> str:
    gpu = resources.gpu if resources is not None else None
    if gpu is not None and gpu.share is None and gpu.whole == 0:
        return "cpu"
    return (gpu.product if gpu is not None and gpu.product else "gpu")


def compile_key(w: Workload, argv: list[str], resources: ResourcesSpec | None) -> str:
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in _PLACE_ONLY:
            skip = True
            continue
        if a.split("=", 1)[0] in _PLACE_ONLY:
            continue
        kept.append(a)
    factors = {"image": w.engine.image, "version": w.version, "device": device(resources), "model": w.model.name,
               "revision": w.model.revision, "argv": kept,
               "env": sorted((e.name, e.value) for e in w.engine.env if e.value is not None)}
    return hashlib.sha256(json.dumps(factors, sort_keys=True).encode()).hexdigest()[:16]


def containers(key: str, operator_image: str, port: int) -> list[dict[str, Any]]:
    """The init containers: restore (before vLLM), then save (a native sidecar: it waits for vLLM's /health)."""
    mounts = [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": VOLUME, "mountPath": COMPILE_CACHE_MOUNT}]
    common = {"image": operator_image, "command": ["pooling-operator"], "volumeMounts": mounts,
              "securityContext": CONTAINER_SECURITY,
              "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}}}
    store = ["--store", COMPILE_CACHE_MOUNT, "--key", key]
    return [
        {"name": "compile-cache-restore", **common,
         "args": ["compile-cache", "restore", *store, "--into", f"{CACHE_MOUNT}/vllm"]},
        {"name": "compile-cache-save", **common, "restartPolicy": "Always",
         "args": ["compile-cache", "save", *store, "--source", f"{CACHE_MOUNT}/vllm",
                  "--health", f"http://127.0.0.1:{port}/health"]},
    ]


def volume(claim_name: str) -> dict[str, Any]:
    return {"name": VOLUME, "persistentVolumeClaim": {"claimName": claim_name}}
