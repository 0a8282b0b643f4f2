"""PoolingService / ScoringService -> Deployment, Service, PodDisruptionBudget, monitors, KEDA ScaledObject."""

from __future__ import annotations

from typing import Any

from pooling_operator.api import PoolingService, ScoringService
from pooling_operator.api.policy import DEFAULT_PROMETHEUS_URL, AutoscalingPolicySpec
from pooling_operator.api.services import AutoscalingSpec
from pooling_operator.builders.common import (
    CONTAINER_SECURITY,
    POD_SECURITY,
    BuildContext,
    health_probes,
    metadata,
    placement,
    pod_metadata,
    resource_requirements,
    selector_labels,
    vllm_env,
    vllm_volumes,
)
from pooling_operator.vllm.args import vllm_command
from pooling_operator.vllm.contract import LATENCY_METRIC, QUEUE_METRIC, Contract
from pooling_operator.vllm.workload import workload

Service = PoolingService | ScoringService


def p99_target(autoscaling: AutoscalingSpec | None, policy: AutoscalingPolicySpec | None) -> float | None:
    if autoscaling is None:
        return None
    if autoscaling.p99_latency_seconds is not None:
        return autoscaling.p99_latency_seconds
    return policy.defaults.p99_latency_seconds if policy else None


def deployment(resource: Service, c: Contract, ctx: BuildContext) -> dict[str, Any]:
    spec = resource.spec
    w = workload(resource)
    port = spec.service.port
    api_key = (spec.service.api_key_secret_ref.name, spec.service.api_key_secret_ref.key) if spec.service.api_key_secret_ref else None
    argv = vllm_command(resource, c, port=port, p99_target=p99_target(spec.autoscaling, ctx.policy))
    volumes, mounts = vllm_volumes(w)
    container = {
        "name": "vllm",
        "image": w.engine.image,
        "command": argv[:2],
        "args": argv[2:],
        "env": vllm_env(w, api_key),
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        **health_probes("http", w.engine.startup_timeout_seconds),
        "resources": resource_requirements(spec.resources),
        "volumeMounts": mounts,
        "securityContext": CONTAINER_SECURITY,
    }
    pod_spec: dict[str, Any] = {
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": POD_SECURITY,
        "terminationGracePeriodSeconds": 60,
        **placement(spec.template, spec.resources),
        "containers": [container],
        "volumes": volumes,
    }
    deploy_spec: dict[str, Any] = {}
    if spec.autoscaling is None:
        deploy_spec["replicas"] = spec.replicas
    deploy_spec.update(
        {
            "selector": {"matchLabels": selector_labels(w.name, w.kind)},
            # A GPU rollout must not need a spare GPU: replace one pod at a time, never surge.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "revisionHistoryLimit": 5,
            "progressDeadlineSeconds": w.engine.startup_timeout_seconds + 600,
            "template": {"metadata": pod_metadata(w, spec.template), "spec": pod_spec},
        }
    )
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata(w, w.name, resource.metadata.uid), "spec": deploy_spec}


def service(resource: Service) -> dict[str, Any]:
    w = workload(resource)
    s = resource.spec.service
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "type": s.type,
            "selector": selector_labels(w.name, w.kind),
            "ports": [{"name": "http", "port": s.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def pod_disruption_budget(resource: Service) -> dict[str, Any]:
    """maxUnavailable 1: a node drain always proceeds, even at one replica; crash-looping pods never block it."""
    w = workload(resource)
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


def service_monitor(resource: Service) -> dict[str, Any]:
    w = workload(resource)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "selector": {"matchLabels": selector_labels(w.name, w.kind)},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def pod_monitor(resource: Service) -> dict[str, Any]:
    w = workload(resource)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "selector": {"matchLabels": selector_labels(w.name, w.kind)},
            "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def queries(resource: Service, policy: AutoscalingPolicySpec | None) -> dict[str, str]:
    """PromQL for queue depth (summed; KEDA divides by replicas) and p99 latency of one service."""
    w = workload(resource)
    a = resource.spec.autoscaling
    window = (a.window if a and a.window else None) or (policy.defaults.window if policy else "60s")
    matchers = f'model_name="{w.served_name}"'
    if w.namespace:
        matchers = f'namespace="{w.namespace}",{matchers}'
    return {
        "queueDepth": f"sum({QUEUE_METRIC}{{{matchers}}})",
        "p99Latency": f"histogram_quantile(0.99, sum by (le) (rate({LATENCY_METRIC}_bucket{{{matchers}}}[{window}])))",
    }


def scaled_object(resource: Service, policy: AutoscalingPolicySpec | None) -> dict[str, Any]:
    w = workload(resource)
    a = resource.spec.autoscaling
    assert a is not None
    defaults = policy.defaults if policy else None
    max_replicas = a.max_replicas
    if policy and policy.limits.max_replicas is not None:
        max_replicas = min(max_replicas, policy.limits.max_replicas)
    queue = a.queue_depth_per_replica or (defaults.queue_depth_per_replica if defaults else 16)
    p99 = p99_target(a, policy)
    url = policy.prometheus.url if policy else DEFAULT_PROMETHEUS_URL
    q = queries(resource, policy)
    triggers: list[dict[str, Any]] = [
        {
            "type": "prometheus",
            "name": "queue-depth",
            "metricType": "AverageValue",
            "metadata": {"serverAddress": url, "query": q["queueDepth"], "threshold": _num(queue)},
        }
    ]
    if p99 is not None:
        triggers.append(
            {
                "type": "prometheus",
                "name": "p99-latency",
                "metricType": "Value",
                "metadata": {"serverAddress": url, "query": q["p99Latency"], "threshold": _num(p99)},
            }
        )

    def behavior(direction: str, default_window: int, default_step: int) -> dict[str, Any]:
        own = a.scale_up if direction == "up" else a.scale_down
        fallback = (defaults.scale_up if direction == "up" else defaults.scale_down) if defaults else None
        window = next((b.stabilization_seconds for b in (own, fallback) if b and b.stabilization_seconds is not None), default_window)
        step = next((b.max_step for b in (own, fallback) if b and b.max_step is not None), default_step)
        if direction == "down" and policy and policy.limits.min_scale_down_stabilization_seconds is not None:
            window = max(window, policy.limits.min_scale_down_stabilization_seconds)
        return {"stabilizationWindowSeconds": window, "policies": [{"type": "Pods", "value": step, "periodSeconds": 15}]}

    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(w, w.name, resource.metadata.uid),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": w.name},
            "minReplicaCount": a.min_replicas,
            "maxReplicaCount": max_replicas,
            "pollingInterval": 15,
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "behavior": {"scaleUp": behavior("up", 0, 4), "scaleDown": behavior("down", 300, 1)}
                }
            },
            "triggers": triggers,
        },
    }


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def build_service(resource: Service, c: Contract, ctx: BuildContext) -> list[dict[str, Any]]:
    spec = resource.spec
    objects = [deployment(resource, c, ctx), service(resource), pod_disruption_budget(resource)]
    if spec.monitoring.service_monitor:
        objects.append(service_monitor(resource))
    if spec.monitoring.pod_monitor:
        objects.append(pod_monitor(resource))
    if spec.autoscaling is not None and spec.autoscaling.backend == "keda":
        objects.append(scaled_object(resource, ctx.policy))
    return objects
