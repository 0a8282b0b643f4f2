"""AutoscalingPolicy: its reconcile, the status of every policy (whether its spec holds, how many services follow
it). Which policies hold is judged once (reconcile/policyset.py)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from pooling_operator.api.autoscaling import AutoscalingSpec
from pooling_operator.api.policy import AutoscalingPolicySpec, policy_name_for
from pooling_operator.k8s.api import ApiError
from pooling_operator.reconcile.context import Context
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.reconcile.writes import write_status
from pooling_operator.status import conditions
from pooling_operator.status import conditions as C
from pooling_operator.status.services import invalid_status

log = logging.getLogger(__name__)


async def reconcile_policies(ctx: Context, policies: PolicySet, policy_bodies: list[dict[str, Any]],
                             services: list[dict[str, Any]]) -> None:
    """Each policy's status: whether its spec holds, and how many services follow it (by policyRef, or as the
    default). Written only when it changed."""
    counts = policy_counts(services, policies.valid)
    for item in policy_bodies:
        name, generation = item["metadata"]["name"], item["metadata"].get("generation")
        errors = policies.invalid.get(name) or []
        if errors:
            status = invalid_status(generation, errors)
        else:
            n = counts.get(name, 0)
            status = {
                "observedGeneration": generation,
                "conditions": [
                    conditions.condition(C.READY, True, C.AVAILABLE, f"{n} services follow this policy.", generation),
                    conditions.condition(C.SPEC_VALID, True, C.VALID, "Every rule holds.", generation),
                ],
                "services": n,
            }
        try:
            await write_status(ctx, item, item.get("status") or {}, status)
        except ApiError as exc:
            log.info("Could not write the status of AutoscalingPolicy %s: %s", name, exc)


def policy_counts(services: list[dict[str, Any]], policies: Mapping[str, AutoscalingPolicySpec]) -> dict[str, int]:
    """Services (valid, autoscaled) per policy name they follow; namespace selectors of default policies are
    applied by the reconcile of each service, so a service outside them may be counted for a named policy it
    cannot use (its own status says so)."""
    counts: dict[str, int] = {}
    for body in services:
        raw = (body.get("spec") or {}).get("autoscaling")
        if not isinstance(raw, dict):
            continue
        try:
            autoscaling = AutoscalingSpec.model_validate(raw)
        except ValueError:
            continue
        name = policy_name_for(autoscaling, policies)
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return counts
