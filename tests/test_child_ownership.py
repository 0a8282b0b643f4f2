"""A child's name held by an object the resource does not control (issue 42.1): never written over, adopted or
deleted; what would name it is not created; the resource says so and goes on once the name is free. The same on
the API server, for every child kind: e2e/tests/operator/test_foreign_children.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from pooling_operator.builders.ownership import held_by
from pooling_operator.status import conditions as C
from tests.factories import hidden_states, pooling
from tests.test_reconcile import cond, world

OWNER = {"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingService", "metadata": {"name": "payments", "uid": "u-1"}}


def ref(kind: str, name: str, uid: str, *, controller: bool = True, api: str = "vllm-pooling.io/v1alpha1") -> dict[str, Any]:
    return {"apiVersion": api, "kind": kind, "name": name, "uid": uid, "controller": controller}


@pytest.mark.parametrize(
    ("found", "held"),
    [
        ({"metadata": {"ownerReferences": [ref("PoolingService", "payments", "u-1")]}}, None),  # ours
        ({"metadata": {"ownerReferences": [ref("PoolingService", "payments", "u-0")]}}, None),  # our predecessor's
        ({"metadata": {"ownerReferences": [ref("ScoringService", "payments", "u-2")]}}, "controlled by ScoringService payments"),
        ({"metadata": {"ownerReferences": [ref("ReplicaSet", "payments", "u-3", api="apps/v1")]}}, "controlled by ReplicaSet payments"),
        ({"metadata": {"ownerReferences": [ref("PoolingService", "payments", "u-1", controller=False)]}}, "with no controller"),
        ({"metadata": {"managedFields": [{"manager": "kubectl-client-side-apply"}, {"manager": "helm"}]}},
         "with no controller, written by helm, kubectl-client-side-apply"),
        ({"metadata": {}}, "with no controller"),
    ],
    ids=["ours", "predecessor", "another-kind-same-name", "another-controller", "owner-not-controller", "hand-made", "bare"],
)
def test_whose_an_existing_object_is(found: dict[str, Any], held: str | None) -> None:
    assert held_by(found, OWNER) == held


def reconcile_twice(body: dict[str, Any], held: dict[tuple[str, str], dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
    reconciles, kube, body = world(body)
    kube.held.update(held)

    async def main() -> dict[str, Any]:
        status = await reconciles.reconcile(body)
        await reconciles.reconcile(body)  # the recheck: the name is still taken
        await reconciles.ctx.events.drain()
        return status

    return kube, asyncio.run(main())


def test_a_service_name_held_by_a_hand_made_service_is_left_alone_and_said() -> None:
    body = pooling({"autoscaling": {"maxReplicas": 2, "backend": "keda"}}, name="payments")
    kube, status = reconcile_twice(body, {("Service", "payments"): {"metadata": {"name": "payments",
                                          "managedFields": [{"manager": "kubectl-client-side-apply"}]}}})  # fmt: skip
    ready = cond(status, C.READY)
    assert (ready["status"], ready["reason"]) == ("False", C.CHILD_NAME_TAKEN)
    assert "Service payments exists with no controller, written by kubectl-client-side-apply" in ready["message"]
    assert cond(status, C.SPEC_VALID)["status"] == "True"
    applied = {(o["kind"], o["metadata"]["name"]) for o in kube.applied}
    assert ("Service", "payments") not in applied  # only ever asked to create, and refused
    assert ("ScaledObject", "payments") not in applied  # the last wave never went out
    assert ("Deployment", "payments") in applied  # it names no Service: its wave went out
    assert not kube.deleted
    warnings = [m for t, r, m in kube.events if t == "Warning" and r == C.CHILD_NAME_TAKEN]
    assert len(warnings) == 1 and "Service payments" in warnings[0]  # once, not once per recheck


def test_a_job_whose_service_account_name_is_held_creates_no_binding_and_no_job() -> None:
    body = hidden_states(name="states")
    account = next(key for key in _desired(body) if key[0] == "ServiceAccount")
    kube, status = reconcile_twice(body, {account: {"metadata": {"ownerReferences": [ref("Deployment", "x", "u-9", api="apps/v1")]}}})
    assert cond(status, C.READY)["reason"] == C.CHILD_NAME_TAKEN
    assert f"ServiceAccount {account[1]} exists controlled by Deployment x" in cond(status, C.READY)["message"]
    applied = {o["kind"] for o in kube.applied}
    assert not applied & {"RoleBinding", "Job"}, applied


def test_children_of_our_predecessor_are_taken_over() -> None:
    body = pooling(name="payments")
    kube, status = reconcile_twice(body, {("Service", "payments"): {"metadata": {"name": "payments",
                                          "ownerReferences": [ref("PoolingService", "payments", "an-older-uid")]}}})  # fmt: skip
    assert cond(status, C.READY)["reason"] != C.CHILD_NAME_TAKEN
    assert ("Service", "payments") in {(o["kind"], o["metadata"]["name"]) for o in kube.applied}


def _desired(body: dict[str, Any]) -> list[tuple[str, str]]:
    """What a first reconcile with every name free applies."""
    reconciles, kube, body = world(body)
    asyncio.run(reconciles.reconcile(body))
    return [(o["kind"], o["metadata"]["name"]) for o in kube.applied]
