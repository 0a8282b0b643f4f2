"""A service's router on the real API server (issue 69): the session operator, running with exactly the chart's
RBAC, writes vllm-router's children for a PoolingService with spec.routing: the API server lets an operator
create a Role only with permissions it holds itself (RBAC's escalation check), so the router's Role that reads
pods passes here only if the chart grants the operator what the router needs. status.endpoint names the router;
Ready waits for the router's replica; routing removed, the router's seven children go and the endpoint is the
service's own again. Beside an API key,
the API server refuses routing with the CEL rule's message.

kwok runs the router's pods as it runs every pod (it starts no process): what vllm-router carries of vLLM's
routes is held to its 0.1.17 sources in tests/test_router.py.
"""

from __future__ import annotations

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.tests.operator.test_services import apply, cond, get, path, svc
from pooling_operator.api import messages as M

ROUTER_CHILDREN = ("serviceaccounts", "roles", "rolebindings", "deployments", "services", "poddisruptionbudgets")


def test_the_router_is_written_with_the_operators_own_rbac_named_in_status_and_taken_back(
    cluster: ControlPlane, operator: OperatorProcess, namespace: str
) -> None:
    apply(cluster, svc(namespace, name="routed", spec={"routing": {"vllmRouter": {"replicas": 1}}, "networkPolicy": {}}))
    for plural in (*ROUTER_CHILDREN, "networkpolicies"):
        child = wait_for(lambda p=plural: get(cluster, path(namespace, p, "routed-router")), timeout=60, what=f"the router's {plural}")
        assert child["metadata"]["ownerReferences"][0]["name"] == "routed", plural
    role = get(cluster, path(namespace, "roles", "routed-router"))
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    wait_for(
        lambda: (get(cluster, path(namespace, "poolingservices", "routed")).get("status") or {}).get("endpoint")
        == f"http://routed-router.{namespace}.svc:8000",
        timeout=60, what="status.endpoint naming the router",
    )  # fmt: skip
    # kwok makes the router's pod Ready as it does every pod: Ready waits for it (RouterNotReady before)
    wait_for(lambda: cond(get(cluster, path(namespace, "poolingservices", "routed")), "Ready").get("reason") == "Available",
             timeout=90, what="Ready, the router's replica ready too")  # fmt: skip
    # the router's pods are not the service's: its Deployment and Service select its own
    router_pods = get(cluster, path(namespace, "deployments", "routed-router"))["spec"]["template"]["metadata"]["labels"]
    selector = get(cluster, path(namespace, "services", "routed"))["spec"]["selector"]
    assert any(router_pods.get(k) != v for k, v in selector.items())

    apply(cluster, svc(namespace, name="routed"))
    for plural in (*ROUTER_CHILDREN, "networkpolicies"):
        wait_for(lambda p=plural: get(cluster, path(namespace, p, "routed-router")) is None, timeout=60, what=f"the router's {plural} deleted")
    wait_for(
        lambda: get(cluster, path(namespace, "poolingservices", "routed"))["status"].get("endpoint") == f"http://routed.{namespace}.svc:8000",
        timeout=60, what="status.endpoint back to the service's own",
    )  # fmt: skip
    assert get(cluster, path(namespace, "services", "routed")) is not None


def test_routing_beside_an_api_key_is_refused_by_the_api_server(cluster: ControlPlane, namespace: str) -> None:
    doc = svc(namespace, name="keyed", spec={"routing": {"vllmRouter": {}}, "service": {"apiKeySecretRef": {"name": "k", "key": "k"}}})
    res = apply(cluster, doc, check=False)
    assert res.returncode != 0 and M.ROUTER_NO_API_KEY[:60] in res.stderr and "spec.routing" in res.stderr, res.stderr
