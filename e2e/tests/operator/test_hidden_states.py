"""HiddenStateJob on the real control plane: the Job's shape, progress aggregated into status, Succeeded
once kwok completes the pods, deletion that leaves the data's volume claim alone, and a full output volume
(the driver's exit 5) failing the Job at once with its reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from tests.factories import hidden_states

API = "/apis/vllm-pooling.io/v1alpha1"


def get(cluster: ControlPlane, path: str) -> Any:
    status, body = cluster.api.request("GET", path)  # type: ignore[union-attr]
    return body if status == 200 else None


def claims(cluster: ControlPlane, namespace: str) -> None:
    """Two bound claims (static PersistentVolumes; there is no provisioner in the test cluster)."""
    docs = []
    for name in ("datasets", "hidden-states"):
        pv = f"{namespace}-{name}"[:63]
        docs.append({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv},
                     "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                              "hostPath": {"path": f"/tmp/{pv}"},
                              "claimRef": {"namespace": namespace, "name": name}}})
        docs.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": namespace},
                     "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": "", "volumeName": pv,
                              "resources": {"requests": {"storage": "10Gi"}}}})
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    for name in ("datasets", "hidden-states"):
        wait_for(lambda n=name: (get(cluster, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{n}") or {})
                 .get("status", {}).get("phase") == "Bound", timeout=60, what=f"claim {name} Bound")


def cond(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def test_hidden_state_job_runs_to_success(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    claims(cluster, namespace)
    job_obj = hidden_states({"shards": 2, "parallelism": 2, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}},
                             "output": {"storageBudget": "1Gi"}}, name="extract", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(job_obj))
    job = wait_for(lambda: get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/extract"), timeout=60, what="Job")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"], spec["backoffLimitPerIndex"]) == ("Indexed", 2, 2, 3)
    pod = spec["template"]["spec"]
    assert pod["initContainers"][0]["name"] == "vllm" and pod["initContainers"][0]["restartPolicy"] == "Always"
    assert pod["containers"][0]["args"][:2] == ["hidden-states", "run"]
    volumes = {v["name"]: v.get("persistentVolumeClaim", {}).get("claimName") for v in pod["volumes"]}
    assert volumes.items() >= {"dataset": "datasets", "output": "hidden-states"}.items()
    role = get(cluster, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/roles/extract")
    assert role["rules"][0]["resourceNames"] == ["extract-progress"]
    # What the drivers would report (their own writes are tested against the stand-in in tests/).
    report = {f"shard-{i}": json.dumps({"state": "succeeded", "done": 10 + i, "failed": i, "bytes": 1000, "total": 10 + 2 * i})
              for i in range(2)}
    cluster.kubectl("patch", "configmap/extract-progress", "-n", namespace, "--type=merge", "-p", json.dumps({"data": report}))

    def succeeded() -> dict[str, Any] | None:
        obj = get(cluster, f"{API}/namespaces/{namespace}/hiddenstatejobs/extract")
        return obj if cond(obj, "Succeeded").get("status") == "True" and obj["status"]["samples"]["done"] == 21 else None

    obj = wait_for(succeeded, timeout=120, what="Succeeded with the reported samples")
    status = obj["status"]
    assert status["samples"] == {"done": 21, "failed": 1} and status["bytesWritten"] == 2000
    assert status["shards"]["total"] == 2 and status["shards"]["succeeded"] == 2
    assert status["output"] == {"path": "hidden-states:/runs/qwen3-8b", "manifests": ["shard-0/manifest.jsonl", "shard-1/manifest.jsonl"]}
    assert cond(obj, "Failed")["status"] == "False" and "completionTime" in status

    cluster.kubectl("delete", "hsj/extract", "-n", namespace, "--wait=true")
    wait_for(lambda: get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/extract") is None, timeout=60, what="Job collected")
    assert get(cluster, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/hidden-states") is not None


def test_driver_reports_progress_with_only_its_role(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """The driver's progress writer, authenticated as the job's ServiceAccount, may patch its ConfigMap and
    nothing else; the operator turns the report into status."""
    import asyncio

    from kubernetes_asyncio import client

    from pooling_operator.k8s.api import KINDS, ApiError, Kube
    from pooling_operator.k8s.progress import ProgressConfigMap

    claims(cluster, namespace)
    job_obj = hidden_states({"shards": 2, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}}}, name="progress", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(job_obj))
    wait_for(lambda: get(cluster, f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings/progress"), timeout=60, what="RoleBinding")
    wait_for(lambda: get(cluster, f"/api/v1/namespaces/{namespace}/configmaps/progress-progress"), timeout=60, what="ConfigMap")
    status, token = cluster.api.request(  # type: ignore[union-attr]
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/progress/token", {"spec": {"expirationSeconds": 600}})
    assert status == 201, token
    config = client.Configuration(host=cluster.server, api_key={"BearerToken": token["status"]["token"]}, api_key_prefix={"BearerToken": "Bearer"})
    config.ssl_ca_cert = str(cluster.pki["ca.crt"])

    async def as_the_job() -> tuple[ApiError, ApiError]:
        kube = Kube(config)
        try:
            await ProgressConfigMap("progress-progress", namespace, kube).write(
                "shard-1", json.dumps({"state": "running", "done": 7, "failed": 2, "bytes": 4096}))
            with pytest.raises(ApiError) as denied:
                await ProgressConfigMap("something-else", namespace, kube).write("shard-1", "{}")
            with pytest.raises(ApiError) as denied_read:
                await kube.get(KINDS["Job"], namespace, "progress")
            return denied.value, denied_read.value
        finally:
            await kube.close()

    denied, denied_read = asyncio.run(as_the_job())
    assert denied.status == 403 and denied_read.status == 403

    def aggregated() -> dict[str, Any] | None:
        obj = get(cluster, f"{API}/namespaces/{namespace}/hiddenstatejobs/progress")
        status = (obj or {}).get("status") or {}
        return obj if status.get("samples") == {"done": 7, "failed": 2} and status.get("bytesWritten") == 4096 else None

    wait_for(aggregated, timeout=60, what="progress in status")


def test_a_full_output_volume_fails_the_job_with_its_reason(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """A shard's driver that meets a full output volume exits 5 and reports output_full (both tested against the
    stand-in and a real tmpfs in tests/test_hidden_states_faults.py). Here the cluster's part: the Job's
    podFailurePolicy ends the Job on that exit code, and the operator names the reason in Failed."""
    claims(cluster, namespace)
    # The pods stay Pending (kwok does not run containers): the test plays the kubelet and the driver.
    template = {"annotations": {"vllm-pooling.io/e2e-ready-after": "1h"}}
    job_obj = hidden_states({"shards": 2, "parallelism": 2, "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}},
                             "template": template}, name="full", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(job_obj))
    pods_path = f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io/job-name%3Dfull"

    def shard_1() -> dict[str, Any] | None:
        pods = (get(cluster, pods_path) or {}).get("items") or []
        return next((p for p in pods if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-completion-index") == "1"
                     and p.get("spec", {}).get("nodeName")), None)

    pod = wait_for(shard_1, timeout=60, what="shard 1's pod scheduled")
    wait_for(lambda: get(cluster, f"/api/v1/namespaces/{namespace}/configmaps/full-progress"), timeout=60, what="ConfigMap")
    report = {"shard-1": json.dumps({"state": "output_full", "done": 7, "failed": 0, "bytes": 4096, "total": 20})}
    cluster.kubectl("patch", "configmap/full-progress", "-n", namespace, "--type=merge", "-p", json.dumps({"data": report}))
    now = "2026-01-01T00:00:00Z"
    driver = {"name": "driver", "ready": False, "restartCount": 0, "image": pod["spec"]["containers"][0]["image"],
              "imageID": "", "started": False,
              "state": {"terminated": {"exitCode": 5, "reason": "Error", "startedAt": now, "finishedAt": now}}}
    cluster.kubectl("patch", f"pod/{pod['metadata']['name']}", "-n", namespace, "--subresource=status", "--type=merge",
                    "-p", json.dumps({"status": {"phase": "Failed", "containerStatuses": [driver]}}))

    def failed() -> dict[str, Any] | None:
        obj = get(cluster, f"{API}/namespaces/{namespace}/hiddenstatejobs/full")
        return obj if cond(obj, "Failed").get("status") == "True" else None

    obj = wait_for(failed, timeout=90, what="Failed")
    reason, message = cond(obj, "Failed")["reason"], cond(obj, "Failed")["message"]
    assert reason == "OutputVolumeFull", message
    assert "hidden-states" in message and "7 finished samples kept" in message
    assert cond(obj, "Ready")["reason"] == "OutputVolumeFull" and cond(obj, "Succeeded")["status"] == "False"
    job = get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/full")
    job_failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert job_failed["reason"] == "PodFailurePolicy", job_failed  # exit 5 ends the Job at once: no retry
