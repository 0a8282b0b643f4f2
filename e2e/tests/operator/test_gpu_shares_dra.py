"""DRA shares placed by the real scheduler: a DeviceClass, a ResourceSlice published as a DRA driver would (one GPU
with its memory, `allowMultipleAllocations`), and services whose ResourceClaimTemplate asks for part of it.

Kubernetes 1.35 holds consumable capacity (KEP-5075) behind the alpha gate DRAConsumableCapacity, off by default.
- With the gate on, on a control plane started for this module only (kube-apiserver, kube-scheduler and
  kube-controller-manager): two 30Gi shares of the one 80Gi device are allocated on it, each claim naming the
  device and the memory it consumed, and a third waits with the scheduler's word in its service's status.
- With the gate off, on the session's control plane, as most clusters are: the API server drops the capacity
  request without an error, the claim takes the whole device, and the operator says so (status, a Warning, the
  GPUs counted) instead of claiming a share it was not given.

Each test adds its own node with a product no other node has, so nothing else lands there."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.harness.config import ClusterConfig
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.crds import install_crds
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig
from e2e.tests.operator.conftest import AUTOSCALE_SECONDS
from e2e.tests.operator.test_gpu_shares import MINILM, node, pods_of, status_messages
from pooling_operator.status.services import WHOLE_DEVICE
from tests.factories import pooling

GATES = "--feature-gates=DRAConsumableCapacity=true"
PRODUCT = "NVIDIA-H100-80GB-HBM3"
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def dra_cluster(cluster: ControlPlane) -> Iterator[ControlPlane]:
    """A control plane of its own with the gate on (the session's stays as a cluster is by default). It asks for
    the session's so the binaries are built first."""
    config = ClusterConfig(gpu_nodes=0, cpu_nodes=1,
                           extra_args={c: [GATES] for c in ("kube-apiserver", "kube-scheduler", "kube-controller-manager")})  # fmt: skip
    cp = ControlPlane(config, binaries=cluster.binaries).start()
    try:
        install_crds(cp, third_party=False)
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def dra_operator(dra_cluster: ControlPlane) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(dra_cluster, "operator-dra", kubeconfig=least_privilege_kubeconfig(dra_cluster), standalone=False,
                           lease_namespace="vllm-pooling-operator")  # fmt: skip
    proc.env["VPO_AUTOSCALE_SECONDS"] = str(AUTOSCALE_SECONDS)
    proc.start()
    yield proc
    proc.stop()


def publish_gpu(cluster: ControlPlane, tag: str) -> tuple[str, str, str]:
    """A node, a DeviceClass and the ResourceSlice a driver `<tag>.e2e.example` would publish for its one GPU:
    (node, device class, device)."""
    assert cluster.api is not None
    name, driver = f"dra-{tag}", f"{tag}.e2e.example"
    cluster.api.apply(f"/api/v1/nodes/{name}", node(name, PRODUCT, {}))
    cluster.api.apply(f"{RESOURCE}/deviceclasses/{driver}", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{driver}'"}}]},
    })  # fmt: skip
    cluster.api.apply(f"{RESOURCE}/resourceslices/{name}", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"name": name},
        "spec": {"driver": driver, "nodeName": name, "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "gpu-0", "allowMultipleAllocations": True,
                              "attributes": {"productName": {"string": PRODUCT}},
                              "capacity": {"memory": {"value": "80Gi"}}}]},
    })  # fmt: skip

    def ready() -> bool:
        _, n = cluster.api.request("GET", f"/api/v1/nodes/{name}")  # type: ignore[union-attr]
        return any(c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions") or [])

    wait_for(ready, timeout=60, what=f"node {name} Ready (kwok)")
    return name, driver, "gpu-0"


def unpublish(cluster: ControlPlane, name: str, driver: str) -> None:
    assert cluster.api is not None
    cluster.api.request("DELETE", f"{RESOURCE}/resourceslices/{name}")
    cluster.api.request("DELETE", f"{RESOURCE}/deviceclasses/{driver}")
    cluster.api.request("DELETE", f"/api/v1/nodes/{name}")


def dra_service(namespace: str, name: str, device_class: str, memory: str) -> dict[str, Any]:
    gpu = {"product": PRODUCT, "share": {"memory": memory, "via": "dra", "deviceClassName": device_class}}
    return pooling({"model": {"hints": MINILM}, "engine": {"maxModelLen": 512},
                    "resources": {"gpu": gpu, "cpu": "1", "memory": "2Gi"}}, name=name, namespace=namespace)  # fmt: skip


def claim_of(cluster: ControlPlane, namespace: str, pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's allocated ResourceClaim (made by kube-controller-manager from the template), else None."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    if not statuses or not statuses[0].get("resourceClaimName"):
        return None
    _, claim = cluster.api.request(  # type: ignore[union-attr]
        "GET", f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{statuses[0]['resourceClaimName']}")
    return claim if ((claim.get("status") or {}).get("allocation")) else None


class NotPlaced(AssertionError):
    """Not yet placed: says where each service stands, which a timeout then reports."""


def placed(cluster: ControlPlane, namespace: str, names: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(node, allocation result) of each service's one pod, once every one is bound and allocated; until then
    raises NotPlaced naming each service's pods, their nodes and claims (wait_for reports the last one)."""
    out, where = [], []
    for n in names:
        pods = pods_of(cluster, namespace, n)
        if len(pods) != 1 or not pods[0]["spec"].get("nodeName"):
            where.append(f"{n}: pods {[(p['metadata']['name'], p['spec'].get('nodeName'), scheduled(p)) for p in pods]}")
            continue
        claim = claim_of(cluster, namespace, pods[0])
        if claim is None:
            where.append(f"{n}: bound to {pods[0]['spec']['nodeName']}, claim not allocated "
                         f"({(pods[0].get('status') or {}).get('resourceClaimStatuses')})")  # fmt: skip
            continue
        [result] = claim["status"]["allocation"]["devices"]["results"]
        out.append((pods[0]["spec"]["nodeName"], result))
    if where:
        raise NotPlaced("; ".join(where))
    return out


def scheduled(pod: dict[str, Any]) -> str:
    """The pod's PodScheduled condition in a few words (absent: the scheduler has not looked at it yet)."""
    c = next((c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), None)
    return "not looked at by the scheduler" if c is None else f"{c['status']} {c.get('reason', '')} {c.get('message', '')}".strip()


def pending_with_the_schedulers_word(cluster: ControlPlane, namespace: str, name: str) -> str | None:
    pods = pods_of(cluster, namespace, name)
    if len(pods) != 1 or pods[0]["spec"].get("nodeName"):
        return None
    scheduled = next((c for c in (pods[0].get("status") or {}).get("conditions") or [] if c["type"] == "PodScheduled"), {})
    said = status_messages(cluster, namespace, name)
    return said if scheduled.get("message") and scheduled["message"] in said else None


def test_two_dra_shares_are_allocated_on_one_device_and_the_third_waits(
    dra_cluster: ControlPlane, dra_operator: OperatorProcess
) -> None:
    cluster = dra_cluster
    namespace = cluster.create_namespace("dra-shares")
    name, device_class, device = publish_gpu(cluster, f"on{uuid.uuid4().hex[:4]}")
    try:
        names = ["share-a", "share-b", "share-c"]
        for n in names[:2]:
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(dra_service(namespace, n, device_class, "30Gi")))
        where = wait_for(lambda: placed(cluster, namespace, names[:2]), timeout=90,
                         what="the first two DRA shares bound and their claims allocated")  # fmt: skip
        for node_name, result in where:
            assert node_name == name
            assert (result["device"], result["driver"]) == (device, device_class)
            assert result["consumedCapacity"] == {"memory": "30Gi"}  # part of the device, not all of it
            assert result.get("shareID")  # one of several allocations of the device
        assert where[0][1]["shareID"] != where[1][1]["shareID"]

        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(dra_service(namespace, names[2], device_class, "30Gi")))
        said = wait_for(lambda: pending_with_the_schedulers_word(cluster, namespace, names[2]), timeout=90,
                        what="the third DRA share Pending (60Gi of 80Gi taken), the scheduler's message in its status")  # fmt: skip
        print(f"\nthe third share's status: {said}")
        assert "claim" in said  # the scheduler's own reason is about the claim, not a resource count
        _, obj = cluster.api.request("GET", f"/apis/vllm-pooling.io/v1alpha1/namespaces/{namespace}/poolingservices/{names[0]}")  # type: ignore[union-attr]
        share = obj["status"]["effective"]["gpuShare"]
        assert "allocation" not in share and share["gpus"] == pytest.approx(30 * 1024 / 81559, abs=1e-4)
    finally:
        cluster.delete_namespace(namespace)
        unpublish(cluster, name, device_class)


def test_with_the_gate_off_a_dra_share_is_a_whole_device_and_the_operator_says_so(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    name, device_class, device = publish_gpu(cluster, f"off{uuid.uuid4().hex[:4]}")
    try:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(dra_service(namespace, "share-a", device_class, "30Gi")))
        [(node_name, result)] = wait_for(lambda: placed(cluster, namespace, ["share-a"]), timeout=90,
                                         what="the DRA share bound and its claim allocated")  # fmt: skip
        assert (node_name, result["device"]) == (name, device)
        assert "consumedCapacity" not in result and "shareID" not in result  # the whole device, exclusively

        def told() -> dict[str, Any] | None:
            _, obj = cluster.api.request("GET", f"/apis/vllm-pooling.io/v1alpha1/namespaces/{namespace}/poolingservices/share-a")  # type: ignore[union-attr]
            share = ((obj.get("status") or {}).get("effective") or {}).get("gpuShare") or {}
            return share if share.get("allocation") == WHOLE_DEVICE else None

        share = wait_for(told, timeout=30, what="status.effective.gpuShare saying the share is a whole device")
        assert share["gpus"] == 1.0

        def warned() -> list[dict[str, Any]]:
            _, body = cluster.api.request("GET", f"/api/v1/namespaces/{namespace}/events")  # type: ignore[union-attr]
            return [e for e in body["items"] if e["reason"] == "GpuShareNotHonoured" and e["type"] == "Warning"]

        [event] = wait_for(warned, timeout=30, what="the GpuShareNotHonoured Warning")
        assert "spec.resources.gpu.share.memory" in event["message"]

        # A second share of the same device cannot be placed: the first holds all of it.
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(dra_service(namespace, "share-b", device_class, "30Gi")))
        wait_for(lambda: pending_with_the_schedulers_word(cluster, namespace, "share-b"), timeout=90,
                 what="the second DRA share Pending, the scheduler's message in its status")  # fmt: skip
    finally:
        unpublish(cluster, name, device_class)
