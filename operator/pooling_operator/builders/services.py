"""PoolingService / ScoringService -> Deployment, Service, PodDisruptionBudget, monitors, KEDA ScaledObject,
the front's InterceptorRoute (builders/front.py), NetworkPolicy."""

from __future__ import annotations

from typing import Any

from pooling_operator import OPERATOR_IMAGE
from pooling_operator.api.identity import selector_labels
from pooling_operator.api.policy import (
    DEFAULT_PROMETHEUS_URL,
    STEP_PERIOD_SECONDS,
    AutoscalingPolicySpec,
    resolve_targets,
)
from pooling_operator.api.resources import Service
from pooling_operator.builders import names
from pooling_operator.builders.common import (  # noqa: F401  (the drain constants re-exported: their users import them from here)
    CONTAINER_SECURITY,
    DRAIN_LIFECYCLE,
    LONGEST_REQUEST_SECONDS,
    NAMESPACE_NAME_LABEL,
    POD_SECURITY,
    PRESTOP_PAUSE_SECONDS,
    SERVER_CONTAINER,
    TERMINATION_GRACE_SECONDS,
    BuildContext,
    CacheMount,
    dra_claim_templates,
    dra_pod_claims,
    health_probes,
    metadata,
    placement,
    pod_metadata,
    resource_requirements,
    served_ingress,
    vllm_env,
    vllm_volumes,
)
from pooling_operator.builders.compile_cache import compile_key
from pooling_operator.builders.compile_cache import containers as compile_cache_containers
from pooling_operator.builders.compile_cache import volume as compile_cache_volume
from pooling_operator.builders.front import (
    concurrency_target,
    external_push_trigger,
    interceptor_route,
    readiness_seconds,
)
from pooling_operator.builders.router import router_children, router_selector
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.metrics import relabelings, service_queries
from pooling_operator.vllm.settings import KEDA_HTTP_SCALER
from pooling_operator.vllm.space_check import READINESS_GATE
from pooling_operator.vllm.workload import Workload, workload

SCRAPE_INTERVAL = "15s"
KEDA_POLLING_SECONDS = 15


def deployment(resource: Service, w: Workload, argv: list[str], model_cache: CacheMount | None = None,
               operator_image: str = OPERATOR_IMAGE) -> dict[str, Any]:
    spec = resource.spec
    port = spec.service.port
    api_key = (spec.service.api_key_secret_ref.name, spec.service.api_key_secret_ref.key) if spec.service.api_key_secret_ref else None
    volumes, mounts = vllm_volumes(w, model_cache)
    container = {
        "name": SERVER_CONTAINER,
        "image": w.engine.image,
        "command": argv[:2],
        "args": argv[2:],
        "env": vllm_env(w, api_key),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        **health_probes("http", w.engine.startup_timeout_seconds),
        "resources": resource_requirements(spec.resources),
        "lifecycle": DRAIN_LIFECYCLE,
        "volumeMounts": mounts,
        "securityContext": CONTAINER_SECURITY,
    }
    pod_spec: dict[str, Any] = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": POD_SECURITY,
        "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
        **placement(spec.template, spec.resources, selector_labels(w.name, w.kind)),
        "containers": [container],
        "volumes": volumes,
    }
    compile_cache = w.engine.compile_cache
    if compile_cache is not None:
        key = compile_key(w, argv, spec.resources)
        pod_spec["initContainers"] = compile_cache_containers(key, operator_image, port)
        pod_spec["volumes"] = [*volumes, compile_cache_volume(compile_cache.claim_name)]
    pod_spec.update(dra_pod_claims(w, spec.resources))
    check = spec.space_check
    if check is not None:  # the space gate (runtime/space_gate.py) sets this condition once the canaries answered
        pod_spec["readinessGates"] = [{"conditionType": READINESS_GATE}]
    # A GPU rollout must not need a spare GPU: replace one pod at a time, never surge; except where a drifting pod is
    # to be held back (spaceCheck hold): then an old pod goes only once a new one is Ready, so the old ones serve
    rolling = {"maxSurge": 1, "maxUnavailable": 0} if check is not None and check.on_drift == "hold" else {"maxSurge": 0, "maxUnavailable": 1}
    deploy_spec: dict[str, Any] = {}
    if spec.autoscaling is None:
        deploy_spec["replicas"] = spec.replicas
    deploy_spec.update(
        {
            "selector": {"matchLabels": selector_labels(w.name, w.kind)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling},
            "revisionHistoryLimit": 5,
            "progressDeadlineSeconds": w.engine.startup_timeout_seconds + 600,
            "template": {"metadata": pod_metadata(w, spec.template), "spec": pod_spec},
        }
    )
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(w, w.name, resource.metadata.uid), "spec": deploy_spec}


def service(resource: Service, w: Workload) -> dict[str, Any]:
    s = resource.spec.service
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "type": "ClusterIP" if resource.spec.routing is not None else s.type,  # routed: the router's Service is reached
            "selector": selector_labels(w.name, w.kind),
            "ports": [{"name": "http", "port": s.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def pod_disruption_budget(resource: Service, w: Workload) -> dict[str, Any]:
    """maxUnavailable 1: a node drain always proceeds, even at one replica; crash-looping pods never block it."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "maxUnavailable": 1,
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
            "selector": {"matchLabels": selector_labels(w.name, w.kind)},
        },
    }


def service_monitor(resource: Service, w: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "selector": {"matchLabels": selector_labels(w.name, w.kind)},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": SCRAPE_INTERVAL, "relabelings": relabelings()}],
        },
    }


def pod_monitor(resource: Service, w: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "selector": {"matchLabels": selector_labels(w.name, w.kind)},
            "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": SCRAPE_INTERVAL, "relabelings": relabelings()}],
        },
    }


def scaled_object(resource: Service, policy: AutoscalingPolicySpec | None, w: Workload | None = None,
                  scaler: str = KEDA_HTTP_SCALER) -> dict[str, Any]:
    """A KEDA ScaledObject with the built-in autoscaler's queue and p99 signals and its behaviour, the wake query
    and a front's trigger (the add-on's `scaler`). KEDA cannot learn a replica's capacity, so the demand and
    in-system signals stay with the operator backend."""
    w = w or workload(resource)
    a = resource.spec.autoscaling
    assert a is not None
    t = resolve_targets(a, policy)
    url = t.prometheus.url if t.prometheus else DEFAULT_PROMETHEUS_URL
    q = service_queries(w.kind, w.namespace, w.name, t.window)
    triggers: list[dict[str, Any]] = [
        {
            "type": "prometheus",
            "name": "waiting",
            "metricType": "AverageValue",
            "metadata": {"serverAddress": url, "query": q.waiting, "threshold": str(t.queue_per_replica)},
        }
    ]
    if t.p99_seconds is not None:
        triggers.append(
            {
                "type": "prometheus",
                "name": "p99",
                "metricType": "Value",
                "metadata": {"serverAddress": url, "query": q.p99, "threshold": _num(t.p99_seconds)},
            }
        )

    if a.wake is not None:
        # vLLM's series vanish with the last pod: the wake query is the trigger that can take the service off zero
        # (KEDA activates a ScaledObject when a trigger's value is above its activationThreshold) and that, while
        # replicas run, counts the demand still pending at the front like the waiting gauge.
        triggers.append(
            {
                "type": "prometheus",
                "name": "wake",
                "metricType": "AverageValue",
                # KEDA's Prometheus scaler takes one series: the sum, as the operator backend reads it
                "metadata": {"serverAddress": url, "query": f"sum({a.wake.prometheus.query})",
                             "threshold": str(t.queue_per_replica), "activationThreshold": "0",
                             "ignoreNullValues": "true"},
            }
        )  # fmt: skip
    if a.front is not None:
        triggers.append(external_push_trigger(w, scaler))

    def behavior(window: int, step: int, doubling: bool = False) -> dict[str, Any]:
        policies: list[dict[str, Any]] = [{"type": "Pods", "value": step, "periodSeconds": STEP_PERIOD_SECONDS}]
        if doubling:  # scaleUp.maxStep unset: four replicas or 100 %, whichever is more (the HPA's default)
            policies.append({"type": "Percent", "value": 100, "periodSeconds": STEP_PERIOD_SECONDS})
            return {"stabilizationWindowSeconds": window, "selectPolicy": "Max", "policies": policies}
        return {"stabilizationWindowSeconds": window, "policies": policies}

    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": w.name},
            "minReplicaCount": t.min_replicas,
            "maxReplicaCount": t.effective_max,
            "pollingInterval": KEDA_POLLING_SECONDS,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {
                        "scaleUp": behavior(t.up_window_seconds, t.up_max_step, doubling=not t.up_step_set),
                        "scaleDown": behavior(t.down_window_seconds, t.down_max_step),
                    }
                }
            },
            "triggers": triggers,
            # KEDA's idle time before zero: scaleToZero.idleSeconds where set, else KEDA's default (300 s)
            **({"cooldownPeriod": a.scale_to_zero.idle_seconds}
               if a.scale_to_zero is not None and a.scale_to_zero.idle_seconds is not None else {}),
        },
    }


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))




def network_policy(resource: Service, w: Workload, front_namespace: str | None = None) -> dict[str, Any]:
    """Ingress to the pods only on the serving port (which also serves /metrics): builders.common.served_ingress,
    and with routing from the router's pods, whatever the client namespaces are."""
    ingress = served_ingress(resource, front_namespace)
    if resource.spec.routing is not None:
        ingress.append({"from": [{"podSelector": {"matchLabels": router_selector(w)}}], "ports": ingress[0]["ports"]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {"podSelector": {"matchLabels": selector_labels(w.name, w.kind)}, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def build_service(resource: Service, c: Contract, ctx: BuildContext, w: Workload, argv: list[str]) -> list[dict[str, Any]]:
    """Every child of a service, each a function of the resource, its one workload view and its vLLM command
    line (builders.plan resolves both once)."""
    spec = resource.spec
    objects = [deployment(resource, w, argv, ctx.model_cache, ctx.operator_image), service(resource, w), pod_disruption_budget(resource, w)]
    objects[:0] = dra_claim_templates(resource.metadata.uid, w, spec.resources)  # before the pods that name it
    if spec.monitoring.service_monitor:
        objects.append(service_monitor(resource, w))
    if spec.monitoring.pod_monitor:
        objects.append(pod_monitor(resource, w))
    a = spec.autoscaling
    if a is not None and a.front is not None:
        readiness = readiness_seconds(ctx.typical_startup_seconds, w.engine.startup_timeout_seconds)
        target = concurrency_target(spec.engine.max_num_seqs, resolve_targets(a, ctx.policy).queue_per_replica)
        target_service = names.router(w.name) if spec.routing is not None else w.name
        objects.append(interceptor_route(a.front.keda_http_add_on, w, resource.metadata.uid, target_service, spec.service.port,
                                         readiness, target))
    if a is not None and a.backend == "keda":
        objects.append(scaled_object(resource, ctx.policy, w, ctx.settings.keda_http_scaler))
    if spec.network_policy is not None:
        objects.append(network_policy(resource, w, ctx.settings.keda_http_namespace))
    if spec.routing is not None:
        objects.extend(router_children(resource, w, ctx.settings.keda_http_namespace))
    return objects
