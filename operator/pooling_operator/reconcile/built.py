"""A resource's spec validated and planned once, kept until its spec, labels, annotations or policies change:
a reconcile of an unchanged resource serialises nothing, and nothing downstream resolves again what the plan
holds (the contract, the workload view, the vLLM command line)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from pooling_operator import OPERATOR_IMAGE
from pooling_operator.api import ModelCache
from pooling_operator.api.policy import AutoscalingPolicySpec, policy_for, selects
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import Service, VllmResource
from pooling_operator.builders import BuildContext, CacheMount, plan
from pooling_operator.builders.caches import build_cache
from pooling_operator.builders.diff import with_hash
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.reconcile.state import Built, Memory
from pooling_operator.status import conditions as C
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate


def built(
    memory: Memory, settings: Settings, operator_image: str | None,
    body: dict[str, Any], policies: PolicySet, labels: dict[str, str] | None,
    model_cache: CacheMount | None = None,
) -> Built:
    """Validate and plan once per spec (generation), labels, annotations, policies, namespace labels and the
    ModelCache mounted (its claim and commit); `memory` holds the last result per uid."""
    meta = body["metadata"]
    typical = _typical_startup(body)
    key = (meta.get("generation"), meta.get("resourceVersion") if not meta.get("generation") else None,
           tuple(sorted((meta.get("labels") or {}).items())), tuple(sorted((meta.get("annotations") or {}).items())),
           model_cache, typical)
    known = memory.built.get(meta["uid"])
    if known is not None and known.fits(key, policies, labels):
        return known
    # A service naming a policy that breaks its own rules is judged without policies (the policy is no guide),
    # then refused for the policy (PolicyInvalid) rather than told it "does not exist".
    raw = (body.get("spec") or {}).get("autoscaling") if isinstance(body.get("spec"), dict) else None
    ref = raw.get("policyRef") if isinstance(raw, dict) else None
    names_invalid = isinstance(ref, dict) and ref.get("name") in policies.invalid
    result = validate({k: v for k, v in body.items() if k != "status"}, settings,
                      None if names_invalid else dict(policies.valid), labels)
    resource = result.resource
    out = Built(key, policies, labels, resource, result.errors)  # type: ignore[arg-type]
    if not result.errors and isinstance(resource, ModelCache):  # the cache family: no vLLM, no plan
        objects = build_cache(resource, operator_image or OPERATOR_IMAGE, settings.hub_endpoint)
        out = Built(key, policies, labels, resource, [], desired=[with_hash(o) for o in objects])
    elif not result.errors and resource is not None:
        assert isinstance(resource, VllmResource) and result.contract is not None
        policy: AutoscalingPolicySpec | None = None
        policy_problems: list[Problem] = []
        reason = C.POLICY_NOT_ALLOWED
        if isinstance(resource, Service):  # only services follow a policy
            broken = policies.broken_for(resource.spec.autoscaling, resource.metadata.namespace, labels)
            if broken is not None:
                policy_problems, reason = [broken], C.POLICY_INVALID
            else:
                policy, policy_problems = _policy(resource, policies.valid, labels)
        ctx = BuildContext(policy=policy, model_cache=model_cache, settings=settings, typical_startup_seconds=typical,
                           **({"operator_image": operator_image} if operator_image else {}))
        p = plan(resource, result.contract, ctx, result.workload) if not policy_problems else None
        desired = [with_hash(o) for o in p.objects] if p is not None else []
        if p is not None:  # one copy of the children per resource: the plan's own are not read again
            p = dataclasses.replace(p, objects=desired)
        out = Built(key, policies, labels, resource, [], policy, policy_problems, reason, p, desired)
    memory.built[meta["uid"]] = out
    return out


def _typical_startup(body: dict[str, Any]) -> float | None:
    """status.startup.typicalSeconds of a service with a front (its route's readiness timeout follows it); None
    for every other resource, so a new start-up sample re-plans only those."""
    spec, status = body.get("spec"), body.get("status")
    a = spec.get("autoscaling") if isinstance(spec, dict) else None
    if not isinstance(a, dict) or not a.get("front") or not isinstance(status, dict):
        return None
    startup = status.get("startup")
    typical = startup.get("typicalSeconds") if isinstance(startup, dict) else None
    return float(typical) if isinstance(typical, int | float) and not isinstance(typical, bool) else None


def _policy(
    resource: Service, policies: Mapping[str, AutoscalingPolicySpec], labels: dict[str, str] | None
) -> tuple[AutoscalingPolicySpec | None, list[Problem]]:
    """The policy the service follows, given its namespace's labels; a named policy whose namespaceSelector
    leaves the namespace out is a problem (a condition, not a crash)."""
    a = resource.spec.autoscaling
    if a is None:
        return None, []
    named = policies.get(a.policy_ref.name) if a.policy_ref else None
    if named is not None and labels is not None and not selects(named.namespace_selector, labels):
        assert a.policy_ref is not None
        return None, [Problem(
            "spec.autoscaling.policyRef.name",
            f"AutoscalingPolicy {a.policy_ref.name!r} does not allow namespace {resource.metadata.namespace!r} "
            "(its namespaceSelector); name a policy that selects this namespace, or none to use the default",
        )]
    return policy_for(a, policies, labels), []
