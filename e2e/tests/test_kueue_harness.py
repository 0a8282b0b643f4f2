"""Real Kueue v0.17.0 (e2e/kube/kueue.py) on the real API server with kwok's fake GPU nodes, no operator: what the
scenario tests build on. A suspended Indexed Job with a queue name and ``job-min-parallelism`` is admitted
partially to the GPUs its ClusterQueue has; with no quota its Workload stays pending and the Job suspended; a
higher-priority Job preempts a lower one within the ClusterQueue.

The Jobs' pods carry the kwok stand-in's ``e2e-ready-after: 1h``: they stay Pending, so a Job stays active (kwok
would otherwise complete Job pods at once) and holds its quota for as long as the test looks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from e2e.harness.config import GPU_RESOURCE
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.kueue import (
    GROUP,
    JOB_UID_LABEL,
    MIN_PARALLELISM_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    Kueue,
)
from e2e.standin.exporters import READY_AFTER_ANNOTATION

pytestmark = pytest.mark.controllers

WAIT = 30.0
LOCAL_QUEUE = "team"


def _job(name: str, namespace: str, *, completions: int, parallelism: int, labels: dict[str, str] | None = None,
         min_parallelism: int | None = None) -> dict[str, Any]:
    """An Indexed Job created suspended, one GPU (and a little CPU and memory) per pod, in LOCAL_QUEUE."""
    annotations = {MIN_PARALLELISM_ANNOTATION: str(min_parallelism)} if min_parallelism is not None else {}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {QUEUE_LABEL: LOCAL_QUEUE, **(labels or {})},
                     "annotations": annotations},
        "spec": {
            "suspend": True, "completionMode": "Indexed", "completions": completions, "parallelism": parallelism,
            "template": {
                "metadata": {"annotations": {READY_AFTER_ANNOTATION: "1h"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "work", "image": "busybox",
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi", GPU_RESOURCE: "1"},
                                  "limits": {GPU_RESOURCE: "1"}},
                }]},
            },
        },
    }


def _conditions(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def _shape(wl: dict[str, Any] | None) -> list[tuple[str, str, str, str]]:
    return [(c["type"], c["status"], c.get("reason", ""), c.get("message", "")) for c in _conditions(wl).values()]


@pytest.fixture
def cluster_queue(cluster: ControlPlane, namespace: str) -> Iterator[str]:
    """A ClusterQueue name of this test's own (cluster-scoped), deleted afterwards."""
    name = f"cq-{namespace}"
    yield name
    assert cluster.api is not None
    cluster.api.request("DELETE", f"/apis/{GROUP}/v1beta2/clusterqueues/{name}")


@pytest.fixture
def jobs(cluster: ControlPlane, namespace: str) -> Callable[..., dict[str, Any]]:
    api = cluster.api
    assert api is not None

    def create(name: str, **kw: Any) -> dict[str, Any]:
        status, body = api.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", _job(name, namespace, **kw))
        assert status == 201, body
        return body

    return create


def _get_job(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    assert cluster.api is not None
    return cluster.api.get(f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")


def test_partial_admission_to_the_quota(kueue: Kueue, cluster: ControlPlane, namespace: str, cluster_queue: str,
                                        jobs: Callable[..., dict[str, Any]]) -> None:
    kueue.queues(namespace, LOCAL_QUEUE, cluster_queue, {"cpu": "8", "memory": "16Gi", GPU_RESOURCE: "2"})
    began = time.monotonic()
    created = jobs("shard", completions=4, parallelism=4, min_parallelism=1)

    job = wait_for(lambda: (j := _get_job(cluster, namespace, "shard"))["spec"].get("suspend") is False and j,
                   timeout=WAIT, what="Job shard unsuspended by Kueue")
    admitted = time.monotonic() - began
    assert job["spec"]["parallelism"] == 2, job["spec"]  # what fits in 2 GPUs
    assert job["spec"]["completions"] == 4, job["spec"]  # partial admission leaves the work as it was

    wl = kueue.workload_of(namespace, "shard")
    assert wl is not None
    assert wl["metadata"]["name"].startswith("job-shard-"), wl["metadata"]["name"]
    assert wl["metadata"]["labels"][JOB_UID_LABEL] == created["metadata"]["uid"]
    conds = _conditions(wl)
    assert conds["QuotaReserved"]["status"] == "True" and conds["Admitted"]["status"] == "True", _shape(wl)
    (assignment,) = wl["status"]["admission"]["podSetAssignments"]
    assert assignment["count"] == 2, assignment
    assert assignment["resourceUsage"][GPU_RESOURCE] == "2", assignment
    # the Job controller starts only what was admitted
    wait_for(lambda: _get_job(cluster, namespace, "shard").get("status", {}).get("active") == 2,
             timeout=WAIT, what="two active pods of Job shard")
    # the conversion webhook serves the old version too
    old = kueue.workload_of(namespace, "shard", version="v1beta1")
    assert old is not None and old["apiVersion"] == f"{GROUP}/v1beta1"
    print(f"\nKueue admitted Job shard with parallelism 2 of 4 in {admitted:.1f} s; Workload {wl['metadata']['name']}"
          f" conditions: {_shape(wl)}")


def test_no_quota_keeps_the_job_suspended(kueue: Kueue, cluster: ControlPlane, namespace: str,
                                          cluster_queue: str, jobs: Callable[..., dict[str, Any]]) -> None:
    kueue.queues(namespace, LOCAL_QUEUE, cluster_queue, {"cpu": "8", "memory": "16Gi", GPU_RESOURCE: "0"})
    jobs("starved", completions=4, parallelism=4, min_parallelism=1)

    def pending() -> dict[str, Any] | None:
        wl = kueue.workload_of(namespace, "starved")
        reserved = _conditions(wl).get("QuotaReserved")
        return wl if reserved and reserved["status"] == "False" and reserved.get("reason") == "Pending" else None

    wl = wait_for(pending, timeout=WAIT, what="Workload of Job starved pending")
    assert "Admitted" not in _conditions(wl) or _conditions(wl)["Admitted"]["status"] == "False", _shape(wl)
    assert GPU_RESOURCE in _conditions(wl)["QuotaReserved"]["message"], _shape(wl)
    job = _get_job(cluster, namespace, "starved")
    assert job["spec"]["suspend"] is True and job["spec"]["parallelism"] == 4, job["spec"]
    assert not (job.get("status") or {}).get("active"), job.get("status")
    print(f"\npending Workload {wl['metadata']['name']} conditions: {_shape(wl)}")


def test_higher_priority_preempts_within_the_cluster_queue(kueue: Kueue, cluster: ControlPlane, namespace: str,
                                                           cluster_queue: str,
                                                           jobs: Callable[..., dict[str, Any]]) -> None:
    kueue.priority_class("e2e-low", 100)
    kueue.priority_class("e2e-high", 1000)
    kueue.queues(namespace, LOCAL_QUEUE, cluster_queue, {"cpu": "8", "memory": "16Gi", GPU_RESOURCE: "2"})
    jobs("low", completions=2, parallelism=2, labels={PRIORITY_CLASS_LABEL: "e2e-low"})
    wait_for(lambda: _get_job(cluster, namespace, "low")["spec"].get("suspend") is False,
             timeout=WAIT, what="Job low admitted")

    began = time.monotonic()
    jobs("high", completions=2, parallelism=2, labels={PRIORITY_CLASS_LABEL: "e2e-high"})
    wait_for(lambda: _get_job(cluster, namespace, "high")["spec"].get("suspend") is False,
             timeout=WAIT, what="Job high admitted after preempting low")
    preempted = time.monotonic() - began
    assert _get_job(cluster, namespace, "low")["spec"]["suspend"] is True  # suspended again by Kueue
    low = kueue.workload_of(namespace, "low")
    conds = _conditions(low)
    assert conds["Evicted"]["status"] == "True" and conds["Evicted"]["reason"] == "Preempted", _shape(low)
    assert conds["Preempted"]["status"] == "True", _shape(low)
    assert conds["QuotaReserved"]["status"] == "False", _shape(low)
    high = kueue.workload_of(namespace, "high")
    assert high is not None and high["spec"]["priority"] == 1000, high and high["spec"]
    print(f"\nJob high admitted {preempted:.1f} s after creation by preempting low; low's Workload conditions:"
          f" {_shape(low)}")
