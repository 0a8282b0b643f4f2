"""What the autoscaler's loop counts against a namespace's GPU budget (pure helpers, on Deployments as the
cache holds them; the same on the real API server in e2e/tests/operator/test_autoscaling.py)."""

from __future__ import annotations

from typing import Any

import pytest

from pooling_operator.autoscaling.decide import Budget
from pooling_operator.autoscaling.loop import autoscaled, held_by_autoscaled, observed, owner_gpus
from pooling_operator.k8s.cache import project


def deployment(name: str, managers: dict[str, bool], replicas: int = 3, limits: dict[str, str] | None = None) -> dict[str, Any]:
    fields = [{"manager": m, "fieldsV1": {"f:spec": {"f:replicas": {}} if owns else {"f:template": {}}}} for m, owns in managers.items()]
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns", "managedFields": fields,
                     "ownerReferences": [{"kind": "PoolingService", "name": name, "uid": f"u-{name}", "controller": True}]},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"name": "vllm", "resources": {"limits": limits or {"nvidia.com/gpu": "2", "memory": "1Gi"}}},
        ]}}},
    }


def owner(name: str, gpu: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "m"}, "task": "embed"}
    if gpu is not None:
        spec["resources"] = {"gpu": gpu}
    return {"kind": "PoolingService", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize("cached", [False, True], ids=["from the API server", "projected by the cache"])
def test_a_deployment_is_autoscaled_unless_the_operator_apply_sets_its_replicas(cached: bool) -> None:
    def check(managers: dict[str, bool]) -> bool:
        d = deployment("d", managers)
        return autoscaled(project(d) if cached else d)

    assert check({"vllm-pooling-operator": False, "vllm-pooling-operator-autoscaler": True})
    assert check({"vllm-pooling-operator": False})  # a new one: the API server's default 1
    assert check({"vllm-pooling-operator": False, "kube-controller-manager": True})  # KEDA's HPA
    assert not check({"vllm-pooling-operator": True})  # spec.replicas is ours: a fixed-replica service


def test_gpus_come_from_the_owner_spec_whatever_the_resource_name() -> None:
    assert owner_gpus(owner("a", {"count": 2})) == 2
    assert owner_gpus(owner("a", {"count": 1, "resourceName": "nvidia.com/mig-1g.10gb"})) == 1
    assert owner_gpus(owner("a", {"count": 4, "resourceName": "amd.com/gpu"})) == 4
    assert owner_gpus(owner("a", {"count": 0})) == 0
    assert owner_gpus(owner("a", None)) == 1  # the default: one nvidia.com/gpu
    assert owner_gpus(None) == 1  # the owner is gone; its pods are being collected


def test_the_budget_counts_autoscaled_services_only_and_mig_slices_too() -> None:
    """A fixed 2-GPU service beside an autoscaled MIG service, both as the cache holds them: only the autoscaled
    one's 3 slices count (before, the projection made every Deployment look autoscaled, and limits whose name
    does not end in "gpu" were not counted)."""
    fixed = project(deployment("fixed", {"vllm-pooling-operator": True}, replicas=1))
    mig = project(deployment("grow", {"vllm-pooling-operator": False, "vllm-pooling-operator-autoscaler": True},
                             replicas=3, limits={"nvidia.com/mig-1g.10gb": "1"}))
    owners = {"fixed": owner("fixed", {"count": 2}), "grow": owner("grow", {"count": 1, "resourceName": "nvidia.com/mig-1g.10gb"})}
    assert held_by_autoscaled([fixed, mig], lambda d: owners[d["metadata"]["name"]]) == 3


def test_the_budget_message_names_its_figures() -> None:
    b = Budget(limit=3, held=3, per_replica=1)
    assert b.replicas(3) == 3 and Budget(limit=3, held=1, per_replica=1).replicas(1) == 3
    assert Budget(limit=3, held=2, per_replica=2).replicas(1) == 1  # half a replica's room is no room
    message = b.message(3, 6)
    assert "hold 3 of the 3 GPUs" in message and "limits.maxGPUsPerNamespace" in message
    assert "asked for 6 replicas of 1 GPU each (3 more than its 3)" in message


def test_the_decision_sees_the_start_up_the_reconcile_measured() -> None:
    body = owner("a", None) | {"status": {"startup": {"lastSeconds": 80.0, "typicalSeconds": 95.5, "samples": 4}}}
    seen = observed(body, current=3, ready=2, unschedulable=None)
    assert (seen.replicas, seen.ready, seen.startup_seconds) == (3, 2, 95.5)
    assert observed(owner("a", None), 1, 1, None).startup_seconds is None  # no pod was Ready yet
