"""What the fake cluster looks like: ``ClusterConfig`` (node counts, GPUs per node, extra component flags,
kwok stages, start timeout; ``from_env`` reads VPO_GPU_NODES, VPO_GPUS_PER_NODE, VPO_CPU_NODES), the GPU
resource and label names, and the Node objects kwok plays (``node_manifests``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
# Every GPU node also advertises MIG slices as the NVIDIA device plugin's mixed strategy names them (one node
# may hold whole GPUs and sliced ones), so services requesting a slice are placed for real.
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
MIG_SLICES_PER_NODE = 7
# ... and time-sliced replicas as the plugin names them with renameByDefault (examples/gpu-shares.yaml asks for
# one): two GPUs' worth, four replicas each
TIME_SLICED_RESOURCE = "nvidia.com/gpu.shared"
TIME_SLICED_PER_NODE = 8


@dataclass
class ClusterConfig:
    """What the fake cluster looks like. ``from_env`` reads VPO_GPU_NODES, VPO_GPUS_PER_NODE, VPO_CPU_NODES."""

    gpu_nodes: int = 4
    gpus_per_node: int = 8
    cpu_nodes: int = 1
    gpu_product: str = GPU_PRODUCT
    # extra command-line flags per component, e.g. {"kube-controller-manager": ["--v=4"]}
    extra_args: dict[str, list[str]] = field(default_factory=dict)
    # kwok --config files; default: kwok's stages (copied by the build) + cluster/kwok/pod-ready-after.yaml
    kwok_stages: list[Path] | None = None
    start_timeout: float = 120.0
    # users whose requests kube-apiserver writes to <run_dir>/audit.log (harness/audit.py); none: no audit log
    audit_users: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, **overrides: Any) -> ClusterConfig:
        env = os.environ
        values: dict[str, Any] = {
            "gpu_nodes": int(env.get("VPO_GPU_NODES", 4)),
            "gpus_per_node": int(env.get("VPO_GPUS_PER_NODE", 8)),
            "cpu_nodes": int(env.get("VPO_CPU_NODES", 1)),
        }
        values.update(overrides)
        return cls(**values)


def gpu_node_name(i: int) -> str:
    return f"gpu-node-{i}"


def cpu_node_name(i: int) -> str:
    return f"cpu-node-{i}"


def node_manifests(cfg: ClusterConfig) -> list[dict[str, Any]]:
    """Node objects for kwok: annotated as fake, with capacity that node-initialize keeps."""

    def node(name: str, labels: dict[str, str], capacity: dict[str, str]) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                    **labels,
                },
            },
            "spec": {},
            "status": {"capacity": capacity, "allocatable": capacity},
        }

    nodes = []
    for i in range(cfg.gpu_nodes):
        nodes.append(
            node(
                gpu_node_name(i),
                {
                    GPU_PRODUCT_LABEL: cfg.gpu_product,
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.count": str(cfg.gpus_per_node),
                },
                {
                    "cpu": "96",
                    "memory": "1536Gi",
                    "ephemeral-storage": "2Ti",
                    "pods": "110",
                    GPU_RESOURCE: str(cfg.gpus_per_node),
                    MIG_RESOURCE: str(MIG_SLICES_PER_NODE),
                    TIME_SLICED_RESOURCE: str(TIME_SLICED_PER_NODE),
                },
            )
        )
    for i in range(cfg.cpu_nodes):
        nodes.append(
            node(
                cpu_node_name(i),
                {},
                {"cpu": "32", "memory": "128Gi", "ephemeral-storage": "500Gi", "pods": "110"},
            )
        )
    return nodes
