"""A ModelCache's children: its claim (when it asks for one by size) and its fill Job, pure.

The Job runs `pooling-operator model-cache fill` (pods/model_cache/) in the operator image, once per revision (the
Job's name carries a hash of the model and revision: a new revision is a new Job, and a finished Job is never
applied again). Only this Job sees the token. Its result is its termination message
(api/cache_fill_contract.py); a permanent failure (exit EXIT_PERMANENT) ends it at once through its
podFailurePolicy, anything else is retried BACKOFF_LIMIT times.
"""

from __future__ import annotations

from typing import Any

from pooling_operator import API_VERSION
from pooling_operator.api import ModelCache
from pooling_operator.api import cache_fill_contract as F
from pooling_operator.api.identity import labels, selector_labels
from pooling_operator.builders import names
from pooling_operator.builders.common import CONTAINER_SECURITY, POD_SECURITY, env_var, placement, secret_env

CLAIM_MOUNT = "/claim"  # where the fill Job mounts the claim
KIND = "ModelCache"


def claim_name(resource: ModelCache) -> str:
    """The claim the cache lives on: the one it names, or the one created for it."""
    return names.model_cache_claim(resource.metadata.name, resource.spec.storage.claim_name)


def revision(resource: ModelCache) -> str:
    return resource.spec.model.revision or "main"


def snapshot_path(resource: ModelCache, commit: str) -> str:
    """The snapshot's folder inside the claim: hub/models--<org>--<name>/snapshots/<commit> (huggingface_hub's
    repo_folder_name)."""
    return f"{F.HUB_FOLDER}/models--{resource.spec.model.name.replace('/', '--')}/snapshots/{commit}"


def fill_job_name(resource: ModelCache) -> str:
    """One Job per model, revision and claim: a change of any fills again (a finished Job is never re-applied)."""
    return names.fill_job(resource.metadata.name, resource.spec.model.name, revision(resource), claim_name(resource))


def _metadata(resource: ModelCache, name: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels(resource.metadata.name, KIND)}
    if resource.metadata.namespace:
        meta["namespace"] = resource.metadata.namespace
    if resource.metadata.uid:
        meta["ownerReferences"] = [{"apiVersion": API_VERSION, "kind": KIND, "name": resource.metadata.name,
                                    "uid": resource.metadata.uid, "controller": True, "blockOwnerDeletion": True}]
    return meta


def _pod_metadata(resource: ModelCache) -> dict[str, Any]:
    """The user's labels first, ours over them; the user's annotations."""
    t = resource.spec.template
    meta: dict[str, Any] = {"labels": {**((t.labels or {}) if t else {}), **labels(resource.metadata.name, KIND)}}
    if t and t.annotations:
        meta["annotations"] = dict(t.annotations)
    return meta


def claim(resource: ModelCache) -> dict[str, Any] | None:
    """The claim to create (storage.size), or None for an existing one (never touched)."""
    storage = resource.spec.storage
    if storage.size is None:
        return None
    spec: dict[str, Any] = {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": str(storage.size)}}}
    if storage.storage_class_name:
        spec["storageClassName"] = storage.storage_class_name
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": _metadata(resource, claim_name(resource)),
            "spec": spec}


def fill_args(resource: ModelCache, hub_endpoint: str | None) -> list[str]:
    args = ["model-cache", "fill", "--repo", resource.spec.model.name, "--revision", revision(resource),
            "--claim", CLAIM_MOUNT, "--result", F.TERMINATION_LOG]
    return args + (["--endpoint", hub_endpoint] if hub_endpoint else [])


def fill_job(resource: ModelCache, operator_image: str, hub_endpoint: str | None) -> dict[str, Any]:
    token = resource.spec.model.token_secret_ref
    # HF_HUB_OFFLINE=0 over anything a node or an injector sets: the fill is the one pod that goes online.
    env = [env_var("HF_HUB_OFFLINE", "0"), env_var("HF_HUB_DISABLE_TELEMETRY", "1"), env_var("PYTHONUNBUFFERED", "1"),
           env_var("HOME", "/tmp")]
    if token is not None:
        env.append(secret_env("HF_TOKEN", token.name, token.key))
    container = {
        "name": "fill",
        "image": operator_image,
        "command": ["pooling-operator"],
        "args": fill_args(resource, hub_endpoint),
        "env": env,
        "terminationMessagePath": F.TERMINATION_LOG,
        "terminationMessagePolicy": "File",
        # A download and a hash: little CPU to be scheduled with (it takes what is free), memory for the hashing.
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "volumeMounts": [{"name": "claim", "mountPath": CLAIM_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}],
        "securityContext": {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True},
    }
    pod = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,  # the fill talks to the Hub only, never to the API server
        "enableServiceLinks": False,
        "securityContext": POD_SECURITY,
        **placement(resource.spec.template, None, selector_labels(resource.metadata.name, resource.kind)),
        "containers": [container],
        "volumes": [{"name": "claim", "persistentVolumeClaim": {"claimName": claim_name(resource)}},
                    {"name": "tmp", "emptyDir": {}}],
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(resource, fill_job_name(resource)),
        "spec": {
            "backoffLimit": F.BACKOFF_LIMIT,
            "podFailurePolicy": {"rules": [
                {"action": "FailJob", "onExitCodes": {"containerName": "fill", "operator": "In", "values": [F.EXIT_PERMANENT]}},
                {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            ]},
            "template": {"metadata": _pod_metadata(resource), "spec": pod},
        },
    }


def build_cache(resource: ModelCache, operator_image: str, hub_endpoint: str | None) -> list[dict[str, Any]]:
    """Every child of a ModelCache, in apply order: the claim first (the Job's pod mounts it)."""
    pvc = claim(resource)
    return [*([pvc] if pvc is not None else []), fill_job(resource, operator_image, hub_endpoint)]
