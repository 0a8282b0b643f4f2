"""Objects the API server accepts but no one should write, on the real control plane (issue 13): the
operator keeps working for everyone else and answers the writer with a condition naming the field.

Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import json
import sys

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_services import apply, cond, get, path, svc

DEPTH = 5_000  # the API server takes up to 10,000 levels; Python's json and copy stop near 1,000 by default


def test_an_object_nested_thousands_deep_is_refused_and_stops_nothing(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * DEPTH))  # this test's own client reads the object back
    try:
        _refused_and_nothing_stops(cluster, operator, namespace)
    finally:
        sys.setrecursionlimit(limit)


def _refused_and_nothing_stops(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    deep = svc(namespace, "deep")
    deep["spec"]["model"]["hfOverrides"] = {"x": "@"}
    text = json.dumps(deep).replace('"@"', "[" * DEPTH + "]" * DEPTH)
    created = cluster.kubectl("create", "-f", "-", input=text, check=False)
    assert created.returncode == 0, created.stderr  # the API server stores it; the webhook is not in this tier

    def refused() -> dict | None:
        obj = get(cluster, path(namespace, "poolingservices", "deep"))
        return obj if cond(obj, "SpecValid").get("status") == "False" else None

    obj = wait_for(refused, timeout=60, what="the deep PoolingService refused with SpecValid=False")
    assert "spec.model.hfOverrides: nested more than 100 levels deep" in cond(obj, "SpecValid")["message"]
    assert get(cluster, path(namespace, "deployments", "deep")) is None
    # ... and the watch of every PoolingService still works: a service created after it is reconciled.
    apply(cluster, svc(namespace, "after"))
    wait_for(lambda: get(cluster, path(namespace, "deployments", "after")), timeout=60, what="a later service's Deployment")
    assert operator.healthy()


def test_a_child_the_schema_cannot_type_is_refused_once_not_retried_forever(cluster: ControlPlane, operator: OperatorProcess, namespace: str) -> None:
    # An unknown key in the free-form affinity: server-side apply answers 500 "failed to create typed patch
    # object", which the operator used to retry as a server fault.
    apply(cluster, svc(namespace, "typo", {"template": {"affinity": {"nodeAffinity": {"requiredDuringScheduling": {}}}}}))

    def refused() -> dict | None:
        obj = get(cluster, path(namespace, "poolingservices", "typo"))
        return obj if cond(obj, "SpecValid").get("reason") == "ChildRejected" else None

    obj = wait_for(refused, timeout=60, what="SpecValid=False, ChildRejected")
    assert "field not declared in schema" in cond(obj, "SpecValid")["message"]
    assert cond(obj, "SpecValid")["status"] == "False"
