"""Names, labels, owner references and the vLLM pod pieces every workload shares."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from pooling_operator import API_VERSION, OPERATOR_IMAGE
from pooling_operator.api.base import TemplateSpec
from pooling_operator.api.cache_fill_contract import HUB_FOLDER
from pooling_operator.api.gpu import DEFAULT_GPU_RESOURCE, GpuShareSpec, ResourcesSpec
from pooling_operator.api.identity import labels
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.builders import names
from pooling_operator.vllm.args import CACHE_MOUNT, MODEL_CACHE_MOUNT, MODEL_MOUNT
from pooling_operator.vllm.memory import gpus_held
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.workload import Workload

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
TIME_SLICED_RESOURCE = "nvidia.com/gpu.shared"  # the device plugin's renamed time-sliced resource (renameByDefault)
SERVER_CONTAINER = "vllm"  # the container running `vllm serve`, in a service's pods and a job's (as a sidecar)
GPU_CLAIM = "gpu"  # a DRA share's claim, in the pod's resourceClaims and the container's resources.claims
# Scale-down never drops a request in flight: on deletion the pod first pauses (longer than the readiness
# probe's period, so endpoints and load balancers stop sending to it while it still answers), then the server
# gets SIGTERM and finishes what it holds; the grace period covers the pause and the longest request. vLLM's
# pods and the router's (builders/router.py) alike.
PRESTOP_PAUSE_SECONDS = 10
LONGEST_REQUEST_SECONDS = 120
TERMINATION_GRACE_SECONDS = PRESTOP_PAUSE_SECONDS + LONGEST_REQUEST_SECONDS
DRAIN_LIFECYCLE = {"preStop": {"sleep": {"seconds": PRESTOP_PAUSE_SECONDS}}}
# The label the API server puts on every namespace: its name (Kubernetes 1.22+).
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class CacheMount:
    """A Ready ModelCache as the pods of a service or job that use it see it: its claim (mounted read-only) and
    the commit its snapshot holds (passed as --revision; the Hub is offline)."""

    claim_name: str
    revision: str


def served(w: Workload, cache: CacheMount | None) -> Workload:
    """The workload as it is served: a model read from a Ready ModelCache is served at the commit the cache holds
    (its snapshot's folder, passed as --revision), whether or not spec.model.revision pins it. The one place the
    revision is resolved: vLLM's argv, status.effective and status.embeddingSpace, every run record and the
    embedding-space fingerprint read w.model.revision of this workload, so two workloads served the same files
    carry the same fingerprint."""
    source = w.model.source
    if source is None or source.cache is None or cache is None:
        return w
    return dataclasses.replace(w, model=w.model.model_copy(update={"revision": cache.revision}))


@dataclass(frozen=True)
class BuildContext:
    """What builders need beyond the resource: the operator's image, the resolved policy, the ModelCache it
    mounts (model.source.cache) once that is Ready, and for a front the operator's settings (where the add-on
    runs) and the service's typical start-up."""

    operator_image: str = OPERATOR_IMAGE
    policy: AutoscalingPolicySpec | None = None
    model_cache: CacheMount | None = None
    settings: Settings = field(default_factory=Settings)  # where the KEDA HTTP add-on runs, for a front
    typical_startup_seconds: float | None = None  # status.startup.typicalSeconds: a front's readiness timeout


def metadata(w: Workload, name: str, uid: str | None, *, kind: str | None = None) -> dict[str, Any]:
    """Child metadata: name, namespace, labels, and the owner reference when the owner's uid is known."""
    meta: dict[str, Any] = {"name": name}
    if w.namespace:
        meta["namespace"] = w.namespace
    meta["labels"] = labels(w.name, kind or w.kind)
    if uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": API_VERSION,
                "kind": w.kind,
                "name": w.name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return meta


def env_var(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def secret_env(name: str, secret: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def vllm_env(w: Workload, api_key: tuple[str, str] | None = None) -> list[dict[str, Any]]:
    """The vLLM container's environment: caches on the cache volume, telemetry off, secrets from Secrets.

    User entries (engine.env) replace ours of the same name, in our order, then follow in theirs.
    """
    source = w.model.source
    env = [
        env_var("HOME", CACHE_MOUNT),
        env_var("XDG_CACHE_HOME", CACHE_MOUNT),
        env_var("HF_HOME", f"{CACHE_MOUNT}/huggingface"),
        env_var("VLLM_CACHE_ROOT", f"{CACHE_MOUNT}/vllm"),
        env_var("VLLM_NO_USAGE_STATS", "1"),
        env_var("DO_NOT_TRACK", "1"),
        env_var("VLLM_ENGINE_READY_TIMEOUT_S", str(w.engine.startup_timeout_seconds)),
    ]
    if source is not None and (source.volume is not None or source.cache is not None):
        env.append(env_var("HF_HUB_OFFLINE", "1"))
    if source is not None and source.cache is not None:
        env.append(env_var("HF_HUB_CACHE", f"{MODEL_CACHE_MOUNT}/{HUB_FOLDER}"))  # the cache's hub layout, read-only
    token = source.hugging_face.token_secret_ref if source and source.hugging_face else None
    if token is not None:
        env.append(secret_env("HF_TOKEN", token.name, token.key))
    if api_key is not None:
        env.append(secret_env("VLLM_API_KEY", *api_key))
    user = {e.name: e.wire() for e in w.engine.env}
    merged = [user.pop(e["name"], e) for e in env]
    return merged + list(user.values())


def gpu_resource(resources: ResourcesSpec | None) -> tuple[str, int] | None:
    """The extended resource a pod requests for its GPUs, and how many: whole GPUs under gpu.resourceName
    (default one nvidia.com/gpu); a time-sliced share one unit of its shared resource; a MIG share one
    nvidia.com/mig-<profile> (the device plugin's mixed strategy); a DRA share none (its ResourceClaim)."""
    gpu = resources.gpu if resources and resources.gpu else None
    if gpu is None:
        return (DEFAULT_GPU_RESOURCE, 1)
    share = gpu.share
    if share is None:
        return (gpu.whole_resource, gpu.whole) if gpu.whole else None
    if share.via == "timeSlicing":
        return (share.resource_name or TIME_SLICED_RESOURCE, 1)
    if share.via == "mig":
        return (f"nvidia.com/mig-{share.mig_profile}", 1)
    return None


def dra_share(resources: ResourcesSpec | None) -> GpuShareSpec | None:
    """The share a ResourceClaimTemplate requests (via dra), else None."""
    share = resources.gpu.share if resources and resources.gpu else None
    return share if share is not None and share.via == "dra" else None


def claim_request(device_class: str, memory: str) -> dict[str, Any]:
    """A DRA share's one device request: a device of the class and, of it, the share's memory (resource.k8s.io/v1
    `exactly.capacity.requests`: KEP-5075 consumable capacity, alpha in Kubernetes 1.34 and 1.35 behind
    DRAConsumableCapacity, off by default; the driver's devices must allow multiple allocations)."""
    return {"name": GPU_CLAIM, "exactly": {"deviceClassName": device_class, "capacity": {"requests": {"memory": memory}}}}


def claim_template_name(w: Workload, device_class: str, memory: str) -> str:
    return names.gpu_claim_template(w.name, GPU_CLAIM, claim_request(device_class, memory))


def dra_claim_templates(uid: str | None, w: Workload, resources: ResourcesSpec | None) -> list[dict[str, Any]]:
    """A DRA share's ResourceClaimTemplate (each pod's ResourceClaim asks for `claim_request`), else none. Where the
    DRAConsumableCapacity gate is off, the API server drops the capacity request and each claim takes a whole
    device (status.effective.gpuShare says so: status.services.claim_capacity_dropped)."""
    share = dra_share(resources)
    if share is None or not share.device_class_name:
        return []
    memory = str(share.memory)
    return [{
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": metadata(w, claim_template_name(w, share.device_class_name, memory), uid),
        "spec": {"spec": {"devices": {"requests": [claim_request(share.device_class_name, memory)]}}},
    }]  # fmt: skip


def dra_pod_claims(w: Workload, resources: ResourcesSpec | None) -> dict[str, Any]:
    """The pod spec's `resourceClaims` for a DRA share (from its template), else nothing."""
    share = dra_share(resources)
    if share is None or not share.device_class_name:
        return {}
    name = claim_template_name(w, share.device_class_name, str(share.memory))
    return {"resourceClaims": [{"name": GPU_CLAIM, "resourceClaimTemplateName": name}]}


def resource_requirements(resources: ResourcesSpec | None) -> dict[str, Any]:
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if resources and resources.cpu is not None:
        requests["cpu"] = str(resources.cpu)
    if resources and resources.memory is not None:
        requests["memory"] = limits["memory"] = str(resources.memory)
    gpu = gpu_resource(resources)
    if gpu is not None:
        requests[gpu[0]] = limits[gpu[0]] = str(gpu[1])
    out: dict[str, Any] = {}
    if requests:
        out["requests"] = requests
    if limits:
        out["limits"] = limits
    if dra_share(resources):
        out["claims"] = [{"name": GPU_CLAIM}]
    return out


def placement(template: TemplateSpec | None, resources: ResourcesSpec | None, own_pods: dict[str, str]) -> dict[str, Any]:
    """nodeSelector (with the GPU product), tolerations (with the GPU taint), affinity, priority class, image pull
    secrets, runtime class and topology spread (a constraint without labelSelector counts the pods `own_pods`
    matches: the resource's own)."""
    spec: dict[str, Any] = {}
    selector = dict(template.node_selector or {}) if template else {}
    gpu = resources.gpu if resources and resources.gpu else None
    if gpu and gpu.product:
        selector[GPU_PRODUCT_LABEL] = gpu.product
    if selector:
        spec["nodeSelector"] = dict(sorted(selector.items()))
    tolerations = [t.wire() for t in template.tolerations or []] if template else []
    if gpus_held(resources):
        # GPU nodes are tainted with their GPU resource's name (nvidia.com/gpu for every share: MIG and
        # time-sliced resources live on the same nodes)
        resource_name = gpu.whole_resource if gpu and gpu.share is None else DEFAULT_GPU_RESOURCE
        taint = {"key": resource_name, "operator": "Exists", "effect": "NoSchedule"}
        if taint not in tolerations:
            tolerations.append(taint)
    if tolerations:
        spec["tolerations"] = tolerations
    if template and template.affinity:
        spec["affinity"] = template.affinity.wire()
    if template and template.priority_class_name:
        spec["priorityClassName"] = template.priority_class_name
    if template and template.image_pull_secrets:
        spec["imagePullSecrets"] = [ref.wire() for ref in template.image_pull_secrets]
    if template and template.runtime_class_name:
        spec["runtimeClassName"] = template.runtime_class_name
    if template and template.topology_spread_constraints:
        spec["topologySpreadConstraints"] = [
            {**c.wire(), "labelSelector": c.label_selector if c.label_selector is not None else {"matchLabels": dict(own_pods)}}
            for c in template.topology_spread_constraints
        ]
    return spec


def pod_metadata(w: Workload, template: TemplateSpec | None) -> dict[str, Any]:
    """Pod labels: the user's first, ours over them (selectors must match)."""
    meta: dict[str, Any] = {"labels": {**(template.labels or {} if template else {}), **labels(w.name, w.kind)}}
    if template and template.annotations:
        meta["annotations"] = dict(template.annotations)
    return meta


def health_probes(port: str | int, startup_seconds: int) -> dict[str, Any]:
    """vLLM refuses connections until the model is loaded, then answers /health: a long startup budget, then
    tight readiness and a patient liveness."""

    def probe(period: int, failures: int, timeout: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": "/health", "port": port},
            "periodSeconds": period,
            "failureThreshold": failures,
            "timeoutSeconds": timeout,
        }

    return {
        "startupProbe": probe(10, max(1, math.ceil(startup_seconds / 10)), 5),
        "readinessProbe": probe(5, 3, 5),
        "livenessProbe": probe(15, 4, 10),
    }


def vllm_volumes(w: Workload, model_cache: CacheMount | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumes, mounts): /dev/shm in memory, a cache folder, and the model claim when the source is a volume,
    or the ModelCache's claim, read-only, when it is a cache."""
    tp = w.engine.tensor_parallel_size or 1
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi" if tp > 1 else "2Gi"}},
        {"name": "cache", "emptyDir": {}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "cache", "mountPath": CACHE_MOUNT},
    ]
    source = w.model.source
    if source is not None and source.volume is not None:
        volumes.append(
            {"name": "model", "persistentVolumeClaim": {"claimName": source.volume.claim_name, "readOnly": source.volume.read_only}}
        )
        mounts.append({"name": "model", "mountPath": MODEL_MOUNT, "readOnly": source.volume.read_only})
    if source is not None and source.cache is not None and model_cache is not None:
        volumes.append({"name": "model-cache", "persistentVolumeClaim": {"claimName": model_cache.claim_name, "readOnly": True}})
        mounts.append({"name": "model-cache", "mountPath": MODEL_CACHE_MOUNT, "readOnly": True})
    return volumes, mounts


# One UID for every container of a pod, set once here at the pod level and never per container: vLLM's
# hidden-states connector writes its files with safetensors' save_file, mode 0600, and the hidden-state driver
# in the same pod must read and move them; fsGroup does not help with 0600 (hidden-states-cpu.md §3).
# tests/test_hidden_states_driver.py breaks if a container's UID diverges from the pod's.
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "runAsGroup": 1000,
    "fsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def served_ingress(resource: Any, front_namespace: str | None, extra_monitoring_ports: tuple[int, ...] = ()) -> list[dict[str, Any]]:
    """The ingress rules of a server's NetworkPolicy (spec.networkPolicy), on the serving port: from the client
    namespaces (default: the resource's own), from the monitoring namespace (also on `extra_monitoring_ports`),
    and with a front from its namespace (`front_namespace`: the KEDA HTTP add-on's interceptor forwards the
    requests it holds). vLLM's pods and the router's alike (builders/services.py, builders/router.py)."""
    np = resource.spec.network_policy
    assert np is not None
    ports = [{"protocol": "TCP", "port": resource.spec.service.port}]
    clients: dict[str, Any] = {"podSelector": {}} if np.client_namespaces is None else {"namespaceSelector": np.client_namespaces.wire()}
    ingress: list[dict[str, Any]] = [{"from": [clients], "ports": ports}]
    if np.monitoring_namespace:
        monitoring = [*ports, *({"protocol": "TCP", "port": p} for p in extra_monitoring_ports)]
        ingress.append({"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: np.monitoring_namespace}}}], "ports": monitoring})
    a = resource.spec.autoscaling
    if a is not None and a.front is not None and front_namespace:
        ingress.append({"from": [{"namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: front_namespace}}}], "ports": ports})
    return ingress
