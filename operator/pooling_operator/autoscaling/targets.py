"""A service's resolved autoscaling targets (the policy's defaults and caps applied), for the autoscaler and
the simulator alike."""

from __future__ import annotations

from pooling_operator.api.policy import AutoscalingPolicySpec, AutoscalingTargets
from pooling_operator.api.policy import resolve_targets as _resolve
from pooling_operator.api.resources import Service

__all__ = ["AutoscalingTargets", "resolve_targets"]


def resolve_targets(resource: Service, policy: AutoscalingPolicySpec | None) -> AutoscalingTargets:
    autoscaling = resource.spec.autoscaling
    if autoscaling is None:
        raise ValueError(f"{resource.kind} {resource.metadata.name} has no spec.autoscaling")
    return _resolve(autoscaling, policy)
