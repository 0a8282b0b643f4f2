"""What the autoscaler's loop counts against a namespace's GPU budget (pure helpers; the race itself runs on
the real control plane in e2e/tests/operator/test_autoscaling.py)."""

from __future__ import annotations

from typing import Any

from pooling_operator.autoscaling.loop import _autoscaled, _gpus


def deployment(managers: dict[str, bool], gpus: str = "2") -> dict[str, Any]:
    fields = [{"manager": m, "fieldsV1": {"f:spec": {"f:replicas": {}} if owns else {"f:template": {}}}} for m, owns in managers.items()]
    return {
        "metadata": {"managedFields": fields},
        "spec": {"replicas": 3, "template": {"spec": {"containers": [
            {"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": gpus, "memory": "1Gi"}}},
            {"name": "sidecar", "resources": {}},
        ]}}},
    }


def test_a_deployment_counts_unless_the_operator_apply_sets_its_replicas() -> None:
    assert _autoscaled(deployment({"vllm-pooling-operator": False, "vllm-pooling-operator-autoscaler": True}))
    assert _autoscaled(deployment({"vllm-pooling-operator": False}))  # a new one: the API server's default 1
    assert _autoscaled(deployment({"vllm-pooling-operator": False, "kube-controller-manager": True}))  # KEDA's HPA
    assert not _autoscaled(deployment({"vllm-pooling-operator": True}))  # spec.replicas: not autoscaled


def test_gpus_per_pod_sum_every_container() -> None:
    assert _gpus(deployment({}, gpus="2")) == 2
    assert _gpus(deployment({}, gpus="0")) == 0
