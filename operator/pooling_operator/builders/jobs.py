"""HiddenStateJob -> ServiceAccount, Role, RoleBinding, progress ConfigMap and the Indexed Job; the pieces every\njob kind shares (the vLLM sidecar, the driver container, the Indexed Job, the children) are here too."""

from __future__ import annotations

import posixpath
from typing import Any

from pooling_operator.api import HiddenStateJob, kueue
from pooling_operator.api import shard_contract as hs
from pooling_operator.api.identity import selector_labels
from pooling_operator.api.job_base import QueueSpec
from pooling_operator.api.quantity import parse_quantity
from pooling_operator.api.resources import Job
from pooling_operator.api.shard_contract import JOB_ENDING_EXIT_CODES
from pooling_operator.builders import names
from pooling_operator.builders.common import (
    CONTAINER_SECURITY,
    POD_SECURITY,
    SERVER_CONTAINER,
    BuildContext,
    env_var,
    field_env,
    health_probes,
    metadata,
    placement,
    pod_metadata,
    resource_requirements,
    vllm_env,
    vllm_volumes,
)
from pooling_operator.vllm.args import DATASET_MOUNT, DEFAULT_PORT, OUTPUT_MOUNT, output_dir
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.workload import Workload

INDEX_ENV = field_env("JOB_COMPLETION_INDEX", "metadata.annotations['batch.kubernetes.io/job-completion-index']")


def shard_budget_bytes(resource: Job) -> int | None:
    """The storage budget split evenly across shards (floor), or None without a budget."""
    budget = resource.spec.output.storage_budget
    if budget is None:
        return None
    return int(parse_quantity(str(budget))) // resource.spec.shards


def dtype_bytes(dtype: str | None) -> str:
    """The driver's ``--dtype-bytes``: the width of an explicit ``engine.dtype``, else ``auto`` (vLLM's auto
    dtype depends on the model and the device — float32 on a CPU for a bfloat16 model — so the driver takes it
    from the first file's header)."""
    return {"float32": "4", "float16": "2", "bfloat16": "2"}.get(dtype or "auto", "auto")


def run_info(resource: HiddenStateJob, w: Workload, argv: list[str]) -> str:
    """What the driver records beside the manifest (api/shard_contract.run_info)."""
    return hs.run_info(w.model.name, w.model.revision, w.engine.image, argv)


def driver_args(resource: HiddenStateJob, w: Workload, argv: list[str]) -> list[str]:
    spec = resource.spec
    args = [
        "hidden-states", "run",
        "--shard", "$(JOB_COMPLETION_INDEX)",
        "--shards", str(spec.shards),
        "--dataset", posixpath.join(DATASET_MOUNT, spec.dataset.volume.path.lstrip("/")),
        "--output", output_dir(spec.output.volume.path),
        "--endpoint", f"http://127.0.0.1:{DEFAULT_PORT}",
        "--model", w.served_name,
        "--layers", ",".join(str(x) for x in spec.layers),
        "--progress-configmap", names.progress_configmap(w.name),
        "--dtype-bytes", dtype_bytes(spec.engine.dtype),
        "--run-info", run_info(resource, w, argv),
    ]
    hints = spec.model.hints
    if hints and hints.hidden_size:
        args += ["--hidden-size", str(hints.hidden_size)]
    budget = shard_budget_bytes(resource)
    if budget is not None:
        args += ["--budget-bytes", str(budget)]
    return args


def queued(meta: dict[str, Any], queue: QueueSpec | None, parallelism: int) -> dict[str, Any]:
    """A Job that Kueue admits: its labels and annotation added to `meta`, and the spec fields to start it
    with (created suspended; from then on `suspend`, `parallelism` and the pod template's scheduling directives
    are Kueue's, and the reconcile never applies an existing Job again). Nothing without a queue.

    Partial admission (``job-min-parallelism: 1``: Kueue may run fewer shards at once when quota is short) is
    asked for only where there is something to cut: Kueue's webhook refuses a minimum that is not below the
    Job's parallelism (pkg/controller/jobs/job/job_webhook.go, validatePartialAdmissionCreate)."""
    if queue is None:
        return {}
    meta["labels"][kueue.QUEUE_LABEL] = queue.name
    if queue.priority_class_name:
        meta["labels"][kueue.PRIORITY_LABEL] = queue.priority_class_name
    if parallelism > 1:
        meta.setdefault("annotations", {})[kueue.MIN_PARALLELISM_ANNOTATION] = "1"
    return {"suspend": True}


def sidecar(w: Workload, argv: list[str], resources: Any, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """vLLM as a native sidecar: started and probed before the driver, stopped when the driver exits."""
    probes = health_probes("http", w.engine.startup_timeout_seconds)
    return {
        "name": SERVER_CONTAINER,
        "image": w.engine.image,
        "restartPolicy": "Always",
        "command": argv[:2],
        "args": argv[2:],
        "env": [INDEX_ENV, *vllm_env(w)],
        "ports": [{"name": "http", "containerPort": DEFAULT_PORT, "protocol": "TCP"}],
        "startupProbe": probes["startupProbe"],
        "livenessProbe": probes["livenessProbe"],
        "resources": resource_requirements(resources),
        "volumeMounts": mounts,
        "securityContext": CONTAINER_SECURITY,
    }


def driver_container(name: str, args: list[str], ctx: BuildContext, mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator's image running one of its Job commands (the driver, a preflight)."""
    return {
        "name": name,
        "image": ctx.operator_image,
        "command": ["pooling-operator"],
        "args": args,
        "env": [INDEX_ENV, field_env("POD_NAMESPACE", "metadata.namespace"), env_var("PYTHONUNBUFFERED", "1")],
        "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": mounts,
        "securityContext": CONTAINER_SECURITY,
    }


def dataset_mount() -> dict[str, Any]:
    return {"name": "dataset", "mountPath": DATASET_MOUNT, "readOnly": True}


def output_mount() -> dict[str, Any]:
    return {"name": "output", "mountPath": OUTPUT_MOUNT}


def indexed_job(resource: Job, w: Workload, ctx: BuildContext, init: list[dict[str, Any]],
                driver: dict[str, Any], extra_volumes: list[dict[str, Any]]) -> dict[str, Any]:
    """The Indexed Job of a job kind: `init` (the vLLM sidecar among them) and the driver in one pod per shard,
    with the dataset and output claims; a driver exit code in JOB_ENDING_EXIT_CODES, from any of the
    operator's containers, ends the whole Job (a retry cannot help)."""
    spec = resource.spec
    volumes = [
        *extra_volumes,
        {"name": "dataset", "persistentVolumeClaim": {"claimName": spec.dataset.volume.claim_name, "readOnly": True}},
        {"name": "output", "persistentVolumeClaim": {"claimName": spec.output.volume.claim_name}},
    ]
    ours = [c["name"] for c in (*init, driver) if c["image"] == ctx.operator_image]
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "serviceAccountName": w.name,
        "enableServiceLinks": False,
        # vLLM and the driver share POD_SECURITY's one UID: vLLM's files are mode 0600 (see POD_SECURITY)
        "securityContext": POD_SECURITY,
        **placement(spec.template, spec.resources, selector_labels(w.name, w.kind)),
        "initContainers": init,
        "containers": [driver],
        "volumes": volumes,
    }
    meta = metadata(w, w.name, resource.metadata.uid)
    job_spec: dict[str, Any] = queued(meta, spec.queue, spec.parallelism or spec.shards)
    ending = [
        {"action": "FailJob",
         "onExitCodes": {"containerName": name, "operator": "In", "values": list(JOB_ENDING_EXIT_CODES.values())}}
        for name in ours
    ]  # fmt: skip
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            **job_spec,
            "completionMode": "Indexed",
            "completions": spec.shards,
            "parallelism": spec.parallelism or spec.shards,
            "backoffLimitPerIndex": spec.backoff_limit_per_shard,
            "podFailurePolicy": {
                "rules": [
                    *ending,
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]
            },
            "template": {"metadata": pod_metadata(w, spec.template), "spec": pod_spec},
        },
    }


def job(resource: HiddenStateJob, w: Workload, argv: list[str], ctx: BuildContext) -> dict[str, Any]:
    volumes, mounts = vllm_volumes(w, ctx.model_cache)
    # The hidden-state connector writes into the output volume (its staging folder), so vLLM mounts it too.
    vllm = sidecar(w, argv, resource.spec.resources, [*mounts, output_mount()])
    driver = driver_container("driver", driver_args(resource, w, argv), ctx, [dataset_mount(), output_mount()])
    return indexed_job(resource, w, ctx, [vllm], driver, volumes)


def job_children(w: Workload, uid: str | None, job_object: dict[str, Any]) -> list[dict[str, Any]]:
    """Every child of a job kind: its ServiceAccount, a Role and RoleBinding that let the driver patch only the
    progress ConfigMap, that ConfigMap, and the Job."""
    cm = names.progress_configmap(w.name)
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(w, w.name, uid)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(w, w.name, uid),
            # The driver may touch only its job's progress ConfigMap.
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [cm], "verbs": ["get", "patch", "update"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(w, w.name, uid),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": w.name},
            "subjects": [{"kind": "ServiceAccount", "name": w.name, **({"namespace": w.namespace} if w.namespace else {})}],
        },
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(w, cm, uid)},
        job_object,
    ]


def build_job(resource: HiddenStateJob, c: Contract, ctx: BuildContext, w: Workload, argv: list[str]) -> list[dict[str, Any]]:
    """Every child of a HiddenStateJob, each a function of the resource, its one workload view and its vLLM
    command line (builders.plan resolves both once)."""
    return job_children(w, resource.metadata.uid, job(resource, w, argv, ctx))
