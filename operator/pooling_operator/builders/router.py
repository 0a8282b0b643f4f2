"""A service's router (spec.routing.vllmRouter) -> ServiceAccount, Role, RoleBinding, Deployment, Service and
PodDisruptionBudget, each named `<service>-router` (builders/names.py). Pure.

vllm-router finds the service's pods itself (its Kubernetes service discovery: a list and watch of the namespace's
pods, filtered by equality on labels in the router, src/service_discovery.rs): it adds a pod once the pod is Ready
and Running, as http://<podIP>:<port>, so a pod held by the space gate is never sent a request. The router's pods
carry a component of their own (`router`), so neither the service's Service nor the operator's count of the
service's pods ever takes them for vLLM servers. What the router carries of vLLM's routes: vllm/router.py.
"""

from __future__ import annotations

from typing import Any

from pooling_operator.api.identity import COMPONENT_LABEL, INSTANCE_LABEL, MANAGED_LABELS, selector_labels
from pooling_operator.api.resources import Service
from pooling_operator.api.routing import POLICIES, ROUTER_VERSION, VllmRouterSpec
from pooling_operator.builders import names
from pooling_operator.builders.common import (
    CONTAINER_SECURITY,
    DRAIN_LIFECYCLE,
    TERMINATION_GRACE_SECONDS,
    metadata,
    served_ingress,
)
from pooling_operator.vllm.router import (
    METRICS_PORT,  # the router's own Prometheus listener (--prometheus-port; its default)
)
from pooling_operator.vllm.workload import Workload

ROUTER_COMPONENT = "router"
ROUTER_CONTAINER = "router"
# vllm-router logs one INFO line per request under power_of_two (src/policies/power_of_two.rs 82-89); error is a
# level both its launchers accept (the image's Rust CLI: debug|info|warn|error).
LOG_LEVEL = "error"
ROUTER_SECURITY = {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}}


def router_pod_labels(w: Workload) -> dict[str, str]:
    """The router's pods: the service's instance, a component of their own."""
    return {"app.kubernetes.io/name": "vllm-router", INSTANCE_LABEL: w.name, COMPONENT_LABEL: ROUTER_COMPONENT, **MANAGED_LABELS}


def router_selector(w: Workload) -> dict[str, str]:
    return {INSTANCE_LABEL: w.name, COMPONENT_LABEL: ROUTER_COMPONENT}


def router_metadata(w: Workload, uid: str | None) -> dict[str, Any]:
    """A router child's metadata: owned by the service, but labelled as the router (component `router`), so no
    selector of the service's (a ServiceMonitor's, a PodMonitor's, a dashboard's) takes the router for the
    service's pods: the router answers /metrics with one worker's, picked by its policy."""
    meta = metadata(w, names.router(w.name), uid)
    meta["labels"] = router_pod_labels(w)
    return meta


def router_args(w: Workload, spec: VllmRouterSpec, port: int) -> list[str]:
    """The router's command line, in flags both of vllm-router's launchers share (the image's Rust CLI and the
    wheel's Python one): discovery of the service's pods by their selector labels in the pod's own namespace,
    on the serving port (the discovery port defaults to 80)."""
    selector = [f"{k}={v}" for k, v in selector_labels(w.name, w.kind).items()]
    return [
        "--host", "0.0.0.0", "--port", str(port),
        "--policy", POLICIES[spec.policy],
        "--service-discovery", "--selector", *selector,
        "--service-discovery-namespace", "$(POD_NAMESPACE)", "--service-discovery-port", str(port),
        "--prometheus-host", "0.0.0.0", "--prometheus-port", str(METRICS_PORT),
        "--log-level", LOG_LEVEL,
    ]  # fmt: skip


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period, "timeoutSeconds": 2, "failureThreshold": failures}


def router_deployment(resource: Service, w: Workload) -> dict[str, Any]:
    """/readiness answers 200 once the router has a healthy worker (503 before: a front holds requests until then);
    /liveness always 200 while the process runs."""
    spec = resource.spec
    assert spec.routing is not None
    r = spec.routing.vllm_router
    name = names.router(w.name)
    port = spec.service.port
    container = {
        "name": ROUTER_CONTAINER,
        "image": r.image,
        "command": ["vllm-router"],
        "args": router_args(w, r, port),
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"},
                  {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "readinessProbe": _probe("/readiness", 5, 2),
        # it stops accepting on SIGTERM (src/server.rs): out of the Service's endpoints first, as vLLM's pods are
        "lifecycle": DRAIN_LIFECYCLE,
        "livenessProbe": _probe("/liveness", 10, 3),
        "resources": {"requests": {"cpu": r.resources.cpu, "memory": r.resources.memory}, "limits": {"memory": r.resources.memory}},
        "securityContext": {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True},
    }  # fmt: skip
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": router_metadata(w, resource.metadata.uid),
        "spec": {
            "replicas": r.replicas,
            "selector": {"matchLabels": router_selector(w)},
            "revisionHistoryLimit": 5,
            "template": {
                "metadata": {"labels": router_pod_labels(w), "annotations": {"vllm-pooling.io/router-version": ROUTER_VERSION}},
                "spec": {"serviceAccountName": name, "securityContext": ROUTER_SECURITY, "containers": [container],
                         "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS, **_from_template(resource)},
            },
        },
    }


def _from_template(resource: Service) -> dict[str, Any]:
    """What the router's pods take of spec.template: image pull secrets (a mirrored router image), tolerations
    and the priority class; not the node selector or affinity, which place GPU servers."""
    t = resource.spec.template
    out: dict[str, Any] = {}
    if t is not None and t.image_pull_secrets:
        out["imagePullSecrets"] = [ref.wire() for ref in t.image_pull_secrets]
    if t is not None and t.tolerations:
        out["tolerations"] = [x.wire() for x in t.tolerations]
    if t is not None and t.priority_class_name:
        out["priorityClassName"] = t.priority_class_name
    return out


def router_network_policy(resource: Service, w: Workload, front_namespace: str | None) -> dict[str, Any]:
    """With spec.networkPolicy, the router's pods get the policy the service's pods would (builders.common.
    served_ingress), the monitoring namespace also on the router's metrics port."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": router_metadata(w, resource.metadata.uid),
        "spec": {"podSelector": {"matchLabels": router_selector(w)}, "policyTypes": ["Ingress"],
                 "ingress": served_ingress(resource, front_namespace, (METRICS_PORT,))},
    }


def router_children(resource: Service, w: Workload, front_namespace: str | None = None) -> list[dict[str, Any]]:
    """Every child of the router, those its pods name first: the ServiceAccount, a Role that may only read the
    namespace's pods (what its discovery lists and watches), its RoleBinding, the Deployment, a Service of the
    service's type and port (what clients reach; the pods' own Service stays, ClusterIP, for the monitors),
    a PodDisruptionBudget of one and, with spec.networkPolicy, the router's own NetworkPolicy."""
    uid = resource.metadata.uid
    name = names.router(w.name)
    subject = {"kind": "ServiceAccount", "name": name, **({"namespace": w.namespace} if w.namespace else {})}
    s = resource.spec.service
    meta = router_metadata(w, uid)
    children: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [subject],
        },
        router_deployment(resource, w),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "type": s.type,
                "selector": router_selector(w),
                "ports": [{"name": "http", "port": s.port, "targetPort": "http", "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": meta,
            "spec": {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow", "selector": {"matchLabels": router_selector(w)}},
        },
    ]
    if resource.spec.network_policy is not None:
        children.append(router_network_policy(resource, w, front_namespace))
    return children
