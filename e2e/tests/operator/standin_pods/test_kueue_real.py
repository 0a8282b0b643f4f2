"""HiddenStateJobs admitted by real Kueue v0.17.0 (e2e/kube/kueue.py), their pods run by the pod runner with the real
driver against the hidden-state stand-in (runner_process.STANDIN_IMAGE: real vLLM is not the point here), the
runner's node advertising fake nvidia.com/gpu that a ClusterQueue governs.

1. Queued, then partially admitted: with no GPU quota the job waits suspended (Queued WaitingForQuota, in
   Kueue's words, naming the ClusterQueue); given one GPU, Kueue admits one of two shards at once
   (parallelism 1, completions unchanged) and the job completes every sample. The operator never writes the
   Job after creating it.
2. Preempted and resumed: a higher-priority workload takes the ClusterQueue's only GPU mid-shard; the job is
   suspended (Queued Preempted, never Failed), its pods go; once the other workload is gone Kueue admits it
   again and the shard resumes from its manifest: the manifest's lines from before the preemption are kept as
   they were, no sample is redone or lost, and every file's sha256 is the manifest's.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.audit import WRITES
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.kueue import Kueue
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import PodRunner
from e2e.standin.vllm_cli import DELAY_ENV
from e2e.tests.operator.standin_pods.standin_jobs import manifest, prompts, standin_job
from pooling_operator.api import kueue as K

pytestmark = [pytest.mark.controllers, pytest.mark.timeout(600)]

# Two shards at once are 2 x 750m (the stand-in's 250m and the driver's 500m) on the runner's two CPUs.
HIDDEN_SIZE = 32
LAYERS = [1, 3]
ROOMY = {"cpu": "4", "memory": "16Gi"}  # cpu and memory never limit here: the GPU does


def get(cluster: ControlPlane, path: str) -> dict[str, Any] | None:
    status, body = cluster.api.request("GET", path)  # type: ignore[union-attr]
    return body if status == 200 else None


def conds(obj: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def hsj(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    return get(cluster, f"/apis/vllm-pooling.io/v1alpha1/namespaces/{namespace}/hiddenstatejobs/{name}")


def job(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    return get(cluster, f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")


def queued(cluster: ControlPlane, namespace: str, name: str, status: str, reason: str) -> dict[str, Any] | None:
    obj = hsj(cluster, namespace, name)
    c = conds(obj).get("Queued") or {}
    if conds(obj).get("Failed", {}).get("status") == "True":
        raise AssertionError(f"{name} failed: {conds(obj)['Failed']}")
    return obj if (c.get("status"), c.get("reason")) == (status, reason) else None


def succeeded(cluster: ControlPlane, pod_runner: PodRunner, namespace: str, name: str) -> dict[str, Any] | None:
    obj = hsj(cluster, namespace, name)
    if conds(obj).get("Failed", {}).get("status") == "True":
        raise AssertionError(f"{name} failed: {conds(obj)['Failed']}\n{pod_runner.tail(40)}")
    return obj if conds(obj).get("Succeeded", {}).get("status") == "True" else None


def check_files(out: Path, shard: int, lines: list[dict[str, Any]]) -> None:
    for e in lines:
        raw = (out / f"shard-{shard}" / e["file"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == e["sha256"] and len(raw) == e["bytes"], e


def no_pods(cluster: ControlPlane, namespace: str, name: str) -> bool:
    pods = get(cluster, f"/api/v1/namespaces/{namespace}/pods?labelSelector=batch.kubernetes.io/job-name%3D{name}") or {}
    return not pods.get("items")


def operator_job_writes(cluster: ControlPlane, mark: int, namespace: str) -> dict[str, int]:
    counts = cluster.audit.since(mark, namespace)
    return {f"{verb} {res}": n for (verb, res), n in counts.items() if verb in WRITES and res.startswith("jobs")}


def test_queued_then_partially_admitted(cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, kueue: Kueue,
                                        namespace: str) -> None:
    began = time.monotonic()
    cq = f"cq-{namespace}"[:63]
    kueue.queues(namespace, "team-a", cq, {**ROOMY, "nvidia.com/gpu": "0"})
    data = pod_runner.data_claim(namespace) / namespace
    samples = prompts(16, seed=1)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(standin_job(
        namespace, "partial", data, samples, layers=LAYERS, hidden_size=HIDDEN_SIZE, shards=2, queue={"name": "team-a"})))

    def waiting_for_gpus() -> dict[str, Any] | None:  # (a Workload Kueue has not looked at yet says less)
        obj = queued(cluster, namespace, "partial", "True", "WaitingForQuota")
        return obj if obj and "nvidia.com/gpu" in conds(obj)["Queued"]["message"] else None

    obj = wait_for(waiting_for_gpus, timeout=120, what="Queued WaitingForQuota, in Kueue's words")
    message = conds(obj)["Queued"]["message"]
    assert f"ClusterQueue {cq} (LocalQueue team-a)" in message and "nvidia.com/gpu" in message, message
    assert conds(obj)["Ready"]["status"] == "False" and conds(obj)["Failed"]["status"] == "False"
    j = job(cluster, namespace, "partial")
    assert j is not None and j["spec"]["suspend"] is True and no_pods(cluster, namespace, "partial")
    mark = cluster.audit.mark()  # the Job exists: from here on it is Kueue's to write

    kueue.queues(namespace, "team-a", cq, {**ROOMY, "nvidia.com/gpu": "1"})  # one GPU: one shard at a time
    def running() -> dict[str, Any] | None:  # (admitted, and the Job unsuspended: Kueue has set parallelism)
        obj = queued(cluster, namespace, "partial", "False", "Admitted")
        return obj if obj and "shards at once" in conds(obj)["Queued"]["message"] else None

    obj = wait_for(running, timeout=120, what="Queued Admitted, the Job running")
    assert f"Admitted by ClusterQueue {cq}" in conds(obj)["Queued"]["message"]
    assert "1 of 2 shards at once (partial admission)" in conds(obj)["Queued"]["message"], conds(obj)["Queued"]
    j = job(cluster, namespace, "partial")
    assert (j["spec"]["suspend"], j["spec"]["parallelism"], j["spec"]["completions"]) == (False, 1, 2)  # type: ignore[index]

    obj = wait_for(lambda: succeeded(cluster, pod_runner, namespace, "partial"), timeout=300, what="Succeeded")
    out = data / "partial" / "out"
    lines = {s: manifest(out, s) for s in (0, 1)}
    ids = [e["id"] for s in (0, 1) for e in lines[s]]
    assert sorted(ids) == sorted(s["id"] for s in samples) and len(ids) == len(set(ids))
    for s in (0, 1):
        check_files(out, s, lines[s])
    assert obj["status"]["samples"] == {"done": len(samples), "failed": 0}
    assert operator_job_writes(cluster, mark, namespace) == {}
    workload = kueue.workload_of(namespace, "partial")
    assert workload is not None and workload["status"]["admission"]["clusterQueue"] == cq
    print(f"\nKueue: queued, partially admitted (1 of 2) and completed {len(samples)} samples in {time.monotonic() - began:.1f} s")


def test_preempted_mid_shard_and_resumed_without_losing_a_sample(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, kueue: Kueue, namespace: str
) -> None:
    began = time.monotonic()
    cq = f"cq-{namespace}"[:63]
    kueue.queues(namespace, "team-b", cq, {**ROOMY, "nvidia.com/gpu": "1"})
    kueue.priority_class("vpo-e2e-low", 100)
    kueue.priority_class("vpo-e2e-high", 1000)
    data = pod_runner.data_claim(namespace) / namespace
    # The driver keeps 32 requests in flight: at ~2 s each the shard takes ~20 s, long enough to be preempted in.
    samples = prompts(320, seed=2)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(standin_job(
        namespace, "low", data, samples, layers=LAYERS, hidden_size=HIDDEN_SIZE, shards=1,
        queue={"name": "team-b", "priorityClassName": "vpo-e2e-low"}, env={DELAY_ENV: "2000"})))
    out = data / "low" / "out"
    wait_for(lambda: len(manifest(out, 0)) >= 5, timeout=180, what="the low-priority job's first samples")

    # A higher-priority workload that needs the only GPU. Its pod never schedules (no node has the label), so
    # it holds the quota until the test deletes it: nothing here waits on time.
    high = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "high", "namespace": namespace,
                         "labels": {K.QUEUE_LABEL: "team-b", K.PRIORITY_LABEL: "vpo-e2e-high"}},
            "spec": {"suspend": True, "template": {"spec": {
                "restartPolicy": "Never", "nodeSelector": {"vllm-pooling.io/e2e-nowhere": "true"},
                "containers": [{"name": "c", "image": "busybox", "command": ["true"],
                                "resources": {"requests": {"nvidia.com/gpu": "1", "cpu": "100m", "memory": "64Mi"},
                                              "limits": {"nvidia.com/gpu": "1"}}}]}}}}  # fmt: skip
    cluster.kubectl("apply", "-f", "-", input=json.dumps(high))
    obj = wait_for(lambda: queued(cluster, namespace, "low", "True", "Preempted"), timeout=120, what="Queued Preempted")
    message = conds(obj)["Queued"]["message"]
    assert f"ClusterQueue {cq}" in message and "each shard resumes from its manifest" in message, message
    assert conds(obj)["Failed"]["status"] == "False" and conds(obj)["Succeeded"]["status"] == "False"
    assert job(cluster, namespace, "low")["spec"]["suspend"] is True  # type: ignore[index]
    wait_for(lambda: no_pods(cluster, namespace, "low"), timeout=120, what="the preempted job's pods gone")
    before = manifest(out, 0)
    assert 5 <= len(before) < len(samples), len(before)
    check_files(out, 0, before)

    cluster.kubectl("delete", "job", "high", "-n", namespace, "--cascade=background")
    wait_for(lambda: queued(cluster, namespace, "low", "False", "Admitted"), timeout=120, what="admitted again")
    obj = wait_for(lambda: succeeded(cluster, pod_runner, namespace, "low"), timeout=300, what="Succeeded after the resume")
    after = manifest(out, 0)
    assert after[: len(before)] == before  # the lines from before the preemption, as they were
    ids = [e["id"] for e in after]
    assert sorted(ids) == sorted(s["id"] for s in samples) and len(ids) == len(set(ids))  # none lost, none twice
    check_files(out, 0, after)
    assert obj["status"]["samples"] == {"done": len(samples), "failed": 0}
    assert obj["status"]["shards"]["failed"] == 0

    events = (get(cluster, f"/api/v1/namespaces/{namespace}/events") or {}).get("items") or []
    reasons = [e["reason"] for e in sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")
               if e["involvedObject"]["name"] == "low" and e["involvedObject"]["kind"] == "HiddenStateJob"]
    assert "Preempted" in reasons and "Admitted" in reasons, reasons
    print(f"\nKueue: preempted after {len(before)} of {len(samples)} samples, resumed and completed in {time.monotonic() - began:.1f} s")
