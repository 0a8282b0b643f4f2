"""Status that tells the truth, on the real control plane: foreign drift causes no write loop, pods that cannot
be placed are named at once, hand-deleted children come back without a resync, and one Lease decides which
replica acts. Every wait polls with a deadline; nothing sleeps to synchronise."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.harness.audit import split
from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_hidden_states import claims
from e2e.tests.operator.test_services import (
    _resyncs,
    apply,
    cond,
    events,
    get,
    path,
    ready,
    svc,
)
from pooling_operator.k8s.api import FIELD_MANAGER
from tests.factories import hidden_states


def _vllm(dep: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")


def test_foreign_changes_to_a_child_cause_no_write_and_owned_ones_are_taken_back(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, svc(namespace))
    wait_for(lambda: ready(cluster, namespace, "emb"), timeout=90, what="Ready")
    dep = "deployment/emb"
    # A platform and a sidecar injector do their work with their own field managers.
    cluster.kubectl("set", "env", "-n", namespace, dep, "VLLM_INJECTED=1")
    cluster.kubectl("label", "-n", namespace, dep, "platform.example/tier=gpu")
    cluster.kubectl("annotate", "-n", namespace, dep, "platform.example/owner=search")
    sidecar = {"spec": {"template": {"spec": {"containers": [{"name": "injected-proxy", "image": "proxy:1"}]}}}}
    cluster.kubectl("patch", "-n", namespace, dep, "--type=strategic", "-p", json.dumps(sidecar))

    def foreign_kept() -> dict[str, Any] | None:
        d = get(cluster, path(namespace, "deployments", "emb"))
        names = [c["name"] for c in d["spec"]["template"]["spec"]["containers"]]
        env = {e["name"] for e in _vllm(d).get("env", [])}
        return d if "injected-proxy" in names and "VLLM_INJECTED" in env else None

    wait_for(foreign_kept, timeout=30, what="the foreign changes in place")

    def rolled_out() -> bool:
        # The foreign edits changed the pod template: let kube-controller-manager finish that rollout (its
        # writes are not ours) and the service settle before counting.
        d = get(cluster, path(namespace, "deployments", "emb"))
        st = d.get("status") or {}
        obj = ready(cluster, namespace, "emb")
        return bool(obj and st.get("observedGeneration") == d["metadata"]["generation"] and st.get("updatedReplicas") == 1
                    and st.get("replicas") == 1 and cond(obj, "Progressing").get("status") == "False")

    wait_for(rolled_out, timeout=60, what="the foreign rollout finished")

    def announced() -> bool:
        # The operator writes the status first and its event of the Progressing transition after it (a
        # separate request): wait for that event too, so it is not counted as caused by the nudge below.
        c = cond(ready(cluster, namespace, "emb"), "Progressing")
        want = f"Progressing is {c.get('status')}: {c.get('message')}"
        since = (c.get("lastTransitionTime") or "")[:19]
        return any(e.get("message") == want and (e.get("lastTimestamp") or "")[:19] >= since
                   for e in events(cluster, namespace, "emb"))  # fmt: skip

    wait_for(announced, timeout=30, what="the operator's event of the rollout's end")
    # A foreign edit of the Deployment reconciles the service again, from the cache: not one request from the
    # operator about this namespace (the API server's audit log of the operator's requests), not one event.
    # The operator's events only: kube-controller-manager's broadcaster batches and rate-limits its own (the
    # foreign rollout's ScalingReplicaSet, the disruption controller's NoPods for the PDB, counted up in place),
    # so one of those may land after the count; they are not the operator's. Both of the operator's event
    # posters (the reconcile's and the autoscaler's) go through Kube.event, which names it in source.component.
    ours = lambda: [e for e in events(cluster, namespace, "emb")  # noqa: E731
                    if (e.get("source") or {}).get("component") == FIELD_MANAGER]
    mark, visits, events_before = cluster.audit.mark(), _resyncs(operator), len(ours())
    cluster.kubectl("annotate", "-n", namespace, dep, "platform.example/nudge=1")
    wait_for(lambda: _resyncs(operator) >= visits + 1, timeout=30, what="a reconcile after the foreign annotation")
    assert split(cluster.audit.since(mark, namespace))[2] == {}
    assert len(ours()) == events_before
    d = foreign_kept()
    assert d is not None and d["metadata"]["labels"]["platform.example/tier"] == "gpu"
    # A field we own, changed by someone else, is taken back (at once: the Deployment is watched).
    cluster.kubectl("set", "image", "-n", namespace, dep, "vllm=evil:latest")
    image = _vllm(get(cluster, path(namespace, "deployments", "emb")))["image"]
    wait_for(lambda: _vllm(get(cluster, path(namespace, "deployments", "emb")))["image"] != "evil:latest", timeout=15,
             what="our image taken back")
    assert image  # the edit had landed before the operator reverted it
    assert foreign_kept() is not None  # and the foreign parts survived our apply


def test_pods_that_cannot_be_placed_are_named_at_once(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    """No node has 9 GPUs: the scheduler's own message, at once, for a service and a job alike."""
    apply(cluster, svc(namespace, name="huge", spec={"resources": {"gpu": {"count": 9, "product": GPU_PRODUCT}}}))

    def degraded(plural: str, name: str) -> dict[str, Any] | None:
        obj = get(cluster, path(namespace, plural, name)) if plural != "hiddenstatejobs" else get(
            cluster, f"/apis/vllm-pooling.io/v1alpha1/namespaces/{namespace}/hiddenstatejobs/{name}")
        c = cond(obj, "Degraded")
        return obj if c.get("status") == "True" and c.get("reason") == "Unschedulable" else None

    started = time.monotonic()
    obj = wait_for(lambda: degraded("poolingservices", "huge"), timeout=60, what="Degraded=True Unschedulable")
    print(f"\nunschedulable pod named in {time.monotonic() - started:.1f}s")
    assert "Insufficient nvidia.com/gpu" in cond(obj, "Degraded")["message"]
    wait_for(lambda: any(e["reason"] == "Unschedulable" and e["type"] == "Warning" for e in events(cluster, namespace, "huge")),
             timeout=15, what="one Warning event naming it")
    table = cluster.kubectl("get", "pooling", "-n", namespace).stdout
    assert "Unschedulable" in table, table  # at a glance


    claims(cluster, namespace)
    job = hidden_states({"resources": {"gpu": {"count": 9, "product": GPU_PRODUCT}}}, name="huge-job", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(job))
    obj = wait_for(lambda: degraded("hiddenstatejobs", "huge-job"), timeout=60, what="job Degraded=True Unschedulable")
    assert cond(obj, "Ready")["status"] == "False" and cond(obj, "Ready")["reason"] == "Unschedulable"

    # Last (it refuses every new pod of the namespace): a ResourceQuota refusal refusal: the ReplicaSet controller's FailedCreate, at once.
    cluster.kubectl("create", "quota", "no-pods", "-n", namespace, "--hard=pods=0")
    apply(cluster, svc(namespace, name="quota"))
    obj = wait_for(lambda: (o := get(cluster, path(namespace, "poolingservices", "quota")))
                   and cond(o, "Degraded").get("reason") == "FailedCreate" and o, timeout=60, what="Degraded=True FailedCreate")
    assert "exceeded quota" in cond(obj, "Degraded")["message"] and cond(obj, "Ready")["reason"] == "FailedCreate"
    # ...and for a job, whose controller reports the refusal only as an event on the Job.
    job = hidden_states({"resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}}}, name="quota-job", namespace=namespace)
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(job))
    obj = wait_for(lambda: (o := get(cluster, f"/apis/vllm-pooling.io/v1alpha1/namespaces/{namespace}/hiddenstatejobs/quota-job"))
                   and cond(o, "Degraded").get("reason") == "FailedCreate" and o, timeout=60, what="job Degraded=True FailedCreate")
    assert "exceeded quota" in cond(obj, "Degraded")["message"]


@pytest.fixture
def alone(operator: OperatorProcess) -> Iterator[None]:
    """The session's operator stopped for the test (and started again after), so only the test's own
    operators act on the cluster."""
    operator.stop()
    try:
        yield
    finally:
        operator.start()


@pytest.fixture
def slow_resync(cluster: ControlPlane, alone: None) -> Iterator[OperatorProcess]:
    """The only operator on the cluster, with a 600 s resync: what it does within seconds, a watch did."""
    solo = OperatorProcess(cluster, "op-slow-resync", resync_seconds=600).start()
    try:
        yield solo
    finally:
        solo.stop()


def test_a_hand_deleted_child_is_back_within_seconds(cluster: ControlPlane, slow_resync: OperatorProcess, namespace: str) -> None:
    apply(cluster, svc(namespace))
    wait_for(lambda: ready(cluster, namespace, "emb"), timeout=90, what="Ready")
    for plural in ("services", "poddisruptionbudgets"):
        uid = get(cluster, path(namespace, plural, "emb"))["metadata"]["uid"]
        cluster.kubectl("delete", "-n", namespace, plural, "emb", "--wait=true")
        started = time.monotonic()
        wait_for(lambda p=plural, u=uid: (o := get(cluster, path(namespace, p, "emb"))) and o["metadata"]["uid"] != u,
                 timeout=10, what=f"{plural}/emb recreated")
        print(f"\n{plural}/emb recreated {time.monotonic() - started:.1f}s after its deletion")


def test_one_lease_one_actor_and_failover(cluster: ControlPlane, alone: None, namespace: str) -> None:
    """Two replicas on a bare cluster (no peering CRDs): one holds the Lease and acts, the other stands by and is
    healthy; killing the holder hands over within the Lease duration."""
    lease = f"e2e-{namespace}"[:63]
    first = OperatorProcess(cluster, "op-a", standalone=False, lease_name=lease, extra=["-n", namespace]).start()
    wait_for(lambda: "Acquired Lease" in first.log.read_text(), timeout=30, what="op-a holds the Lease")
    second = OperatorProcess(cluster, "op-b", standalone=False, lease_name=lease, extra=["-n", namespace]).start()
    try:
        assert second.healthy()  # a standby answers /healthz, so `helm install --wait` with 2 replicas finishes
        wait_for(lambda: "vllm_pooling_operator_leader 0.0" in second.metrics(), timeout=15, what="op-b reports standby")
        assert "vllm_pooling_operator_leader 1.0" in first.metrics()
        apply(cluster, svc(namespace, name="leased"))
        wait_for(lambda: ready(cluster, namespace, "leased"), timeout=90, what="Ready")
        assert "Created Deployment" in first.log.read_text()
        assert "leased" not in second.log.read_text()  # the standby never acted
        assert first.proc is not None
        first.proc.kill()  # SIGKILL: no release; the Lease must expire
        killed = time.monotonic()
        wait_for(lambda: "Acquired Lease" in second.log.read_text(), timeout=30, what="op-b takes over")
        took = time.monotonic() - killed
        print(f"\nstandby took over {took:.1f}s after the holder was killed (Lease 15 s)")
        assert took <= 15 + 2 + 2  # the Lease duration, plus one retry period and this poll
        cluster.kubectl("delete", "-n", namespace, "service", "leased", "--wait=true")
        wait_for(lambda: get(cluster, path(namespace, "services", "leased")), timeout=20, what="op-b repairs the Service")
    finally:
        first.stop()
        second.stop()


def test_a_terminating_namespace_is_left_alone_quietly(cluster: ControlPlane, operator: OperatorProcess, crds: list[str]) -> None:
    """Deleting a namespace full of services: no warning per event that can no longer be posted, no retries."""
    name = f"e2e-terminating-{int(time.time() * 1000) % 100000}"
    assert cluster.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})[0] == 201  # type: ignore[union-attr]
    wait_for(lambda: get(cluster, f"/api/v1/namespaces/{name}/serviceaccounts/default"), timeout=30, what="default ServiceAccount")
    for i in range(4):
        apply(cluster, svc(name, name=f"s{i}"))
    wait_for(lambda: all(ready(cluster, name, f"s{i}") for i in range(4)), timeout=90, what="4 services Ready")
    offset = operator.log.stat().st_size
    # --wait returns once the namespace is gone: the whole termination (children deleted, pods gone, every
    # event the operator saw) happened meanwhile.
    cluster.kubectl("delete", "namespace", name, "--wait=true", timeout=120)
    tail = operator.log.read_bytes()[offset:].decode(errors="replace")
    noisy = [line for line in tail.splitlines() if name in line and (" WARNING " in line or " ERROR " in line)]
    assert not noisy, "\n".join(noisy[:10])
