"""Rules of autoscaling and of AutoscalingPolicies: not vLLM's, the platform's. Pure: values in, Problems out."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from pooling_operator.api import AutoscalingPolicy
from pooling_operator.api import messages as M
from pooling_operator.api.autoscaling import AutoscalingSpec
from pooling_operator.api.policy import AutoscalingPolicySpec, policy_for
from pooling_operator.api.problems import Problem
from pooling_operator.api.schema import duration_seconds


def autoscaling_problems(
    a: AutoscalingSpec, policies: Mapping[str, AutoscalingPolicySpec] | None, namespace_labels: Mapping[str, str] | None
) -> Iterator[Problem]:
    if a.min_replicas > a.max_replicas:
        yield Problem("spec.autoscaling.minReplicas", M.MIN_LE_MAX_REPLICAS)
    if a.min_replicas < 1 and a.wake is None and a.front is None:
        yield Problem("spec.autoscaling.minReplicas", M.MIN_REPLICAS_ZERO)
    if a.scale_to_zero is not None and a.min_replicas != 0:
        yield Problem("spec.autoscaling.scaleToZero", M.SCALE_TO_ZERO_NEEDS_MIN_ZERO)
    if a.front is not None:
        hosts = a.front.keda_http_add_on.hosts
        if twice := sorted({h for h in hosts if hosts.count(h) > 1}):
            yield Problem("spec.autoscaling.front.kedaHttpAddOn.hosts",
                          f"{', '.join(twice)} appear more than once; list each host once (the InterceptorRoute's hosts are a set)")
    if a.p99_latency is not None and not 0 < duration_seconds(a.p99_latency) <= 3600:
        yield Problem("spec.autoscaling.p99Latency", f"{a.p99_latency} must be above 0 and at most 1h, e.g. 250ms")
    if policies is None:
        return
    policy = policy_for(a, policies, namespace_labels)
    if a.policy_ref is not None and policy is None:
        yield Problem(
            "spec.autoscaling.policyRef.name",
            f"AutoscalingPolicy {a.policy_ref.name!r} does not exist; known: {', '.join(sorted(policies)) or 'none'}",
        )
        return
    cap = policy.limits.max_replicas if policy is not None else None
    if cap is not None and a.min_replicas > cap:
        yield Problem(
            "spec.autoscaling.minReplicas",
            f"{a.min_replicas} is above the policy's limit of {cap} replicas (limits.maxReplicas); use at most {cap}",
        )
    if policy is not None and a.backend not in policy.allowed_backends:
        yield Problem(
            "spec.autoscaling.backend",
            f"backend {a.backend} is not allowed by the policy; allowed: {', '.join(policy.allowed_backends)}",
        )


def policy_problems(resource: AutoscalingPolicy) -> Iterator[Problem]:
    spec = resource.spec
    if not spec.allowed_backends:
        yield Problem("spec.allowedBackends", M.ALLOWED_BACKENDS_NONEMPTY)
    if len(set(spec.allowed_backends)) != len(spec.allowed_backends):
        yield Problem("spec.allowedBackends", "backends must be distinct")
    p99 = spec.defaults.p99_latency
    if p99 is not None and not 0 < duration_seconds(p99) <= 3600:
        yield Problem("spec.defaults.p99Latency", f"{p99} must be above 0 and at most 1h, e.g. 500ms")
    down = spec.defaults.scale_down
    floor = spec.limits.min_scale_down_stabilization_seconds
    if down and down.stabilization_seconds is not None and floor is not None and down.stabilization_seconds < floor:
        yield Problem(
            "spec.defaults.scaleDown.stabilizationSeconds",
            f"{down.stabilization_seconds} is below the policy's own floor limits.minScaleDownStabilizationSeconds "
            f"{floor}",
        )
