"""GPU shares placed by the real scheduler: kwok nodes that advertise a time-sliced resource and MIG slices as
the NVIDIA device plugin does, shared services applied through the operator, and the scheduler's own outcome
asserted: two pods on the one device, the third Pending, and the scheduler's message in the service's status.

Each test adds its own node with a product no other node has, so nothing else lands there."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.harness.config import GPU_PRODUCT_LABEL
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from tests.factories import pooling

MINILM = {"architectures": ["BertModel"], "numHiddenLayers": 6, "hiddenSize": 384, "numAttentionHeads": 12,
          "maxModelLen": 512, "numParameters": 22713216}  # fmt: skip


def node(name: str, product: str, capacity: dict[str, str]) -> dict[str, Any]:
    full = {"cpu": "16", "memory": "64Gi", "ephemeral-storage": "100Gi", "pods": "110", **capacity}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                     "labels": {"kubernetes.io/hostname": name, "type": "kwok", GPU_PRODUCT_LABEL: product}},
        "spec": {}, "status": {"capacity": full, "allocatable": full},
    }  # fmt: skip


@pytest.fixture
def gpu_node(cluster: ControlPlane, request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    name, product, capacity = request.param
    body = node(name, product, capacity)
    assert cluster.api is not None
    cluster.api.apply(f"/api/v1/nodes/{name}", body)

    def ready() -> bool:
        _, n = cluster.api.request("GET", f"/api/v1/nodes/{name}")  # type: ignore[union-attr]
        conds = (n.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    wait_for(ready, timeout=60, what=f"node {name} Ready (kwok)")
    yield body
    cluster.api.request("DELETE", f"/api/v1/nodes/{name}")


def shared(namespace: str, name: str, gpu: dict[str, Any]) -> dict[str, Any]:
    return pooling({"model": {"hints": MINILM}, "engine": {"maxModelLen": 512},
                    "resources": {"gpu": gpu, "cpu": "1", "memory": "2Gi"}}, name=name, namespace=namespace)  # fmt: skip


def pods_of(cluster: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    _, body = cluster.api.request("GET", f"/api/v1/namespaces/{namespace}/pods")  # type: ignore[union-attr]
    return [p for p in body.get("items", []) if p["metadata"]["name"].startswith(f"{name}-")]


def status_messages(cluster: ControlPlane, namespace: str, name: str) -> str:
    _, obj = cluster.api.request("GET", f"/apis/vllm-pooling.io/v1alpha1/namespaces/{namespace}/poolingservices/{name}")  # type: ignore[union-attr]
    return " | ".join(c.get("message", "") for c in (obj.get("status") or {}).get("conditions") or [])


CASES = [
    # (node name, product, what the node advertises, the share, the resource the scheduler counts)
    (("share-ts-0", "NVIDIA-L4", {"nvidia.com/gpu.shared": "2"}),
     {"product": "NVIDIA-L4", "share": {"memory": "2Gi", "via": "timeSlicing"}}, "nvidia.com/gpu.shared"),
    (("share-mig-0", "NVIDIA-A100-SXM4-80GB", {"nvidia.com/mig-1g.10gb": "2"}),
     {"product": "NVIDIA-A100-SXM4-80GB", "share": {"memory": "4Gi", "via": "mig", "migProfile": "1g.10gb"}},
     "nvidia.com/mig-1g.10gb"),
]  # fmt: skip


@pytest.mark.parametrize(("gpu_node", "gpu", "resource"), CASES, indirect=["gpu_node"], ids=["timeSlicing", "mig"])
def test_two_shares_fit_the_device_and_the_third_waits_with_the_schedulers_word(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str, gpu_node: dict[str, Any], gpu: dict[str, Any], resource: str
) -> None:
    names = ["share-a", "share-b", "share-c"]
    for n in names[:2]:
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(shared(namespace, n, gpu)))

    def placed() -> list[str] | None:
        nodes = [p["spec"].get("nodeName") for n in names[:2] for p in pods_of(cluster, namespace, n)]
        return nodes if len(nodes) == 2 and all(nodes) else None

    where = wait_for(placed, timeout=90, what="the first two shared pods bound")
    assert where == [gpu_node["metadata"]["name"]] * 2  # both on the one device's node
    for n in names[:2]:
        [pod] = pods_of(cluster, namespace, n)
        limits = pod["spec"]["containers"][0]["resources"]["limits"]
        assert limits[resource] == "1" and "nvidia.com/gpu" not in limits
        args = pod["spec"]["containers"][0]["args"]
        assert "--gpu-memory-utilization" in args

    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(shared(namespace, names[2], gpu)))

    def waiting_with_the_reason() -> str | None:
        pods = pods_of(cluster, namespace, names[2])
        if len(pods) != 1 or pods[0]["spec"].get("nodeName"):
            return None
        said = status_messages(cluster, namespace, names[2])
        return said if f"Insufficient {resource}" in said else None

    said = wait_for(waiting_with_the_reason, timeout=90, what="the third shared pod Pending, the scheduler's message in its status")
    assert "pod share-c-" in said
