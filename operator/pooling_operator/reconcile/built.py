"""A resource's spec validated and built once, kept until its spec, labels, annotations or policies change:
a reconcile of an unchanged resource serialises nothing."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pooling_operator.api import HiddenStateJob, PoolingService, ScoringService
from pooling_operator.api.policy import AutoscalingPolicySpec, policy_for, selects
from pooling_operator.api.problems import Problem
from pooling_operator.builders import BuildContext, build
from pooling_operator.builders.diff import with_hash
from pooling_operator.vllm.contract import contract, resolve_version
from pooling_operator.vllm.rules import Settings
from pooling_operator.vllm.validate import validate


@dataclass(frozen=True)
class Built:
    """A resource's spec validated and built, for the inputs in `key`, `policies` and `labels`."""

    key: tuple[Any, ...]
    policies: dict[str, AutoscalingPolicySpec]
    labels: dict[str, str] | None
    resource: PoolingService | ScoringService | HiddenStateJob | None
    problems: list[Problem]  # the spec's own
    policy: AutoscalingPolicySpec | None = None
    policy_problems: list[Problem] = field(default_factory=list)
    desired: list[dict[str, Any]] = field(default_factory=list)  # with their applied-hash annotation
    argv: list[str] = field(default_factory=list)  # the serving container's command line

    def fits(self, key: tuple[Any, ...], policies: Mapping[str, AutoscalingPolicySpec], labels: dict[str, str] | None) -> bool:
        return self.key == key and self.policies == policies and self.labels == labels


def _built(
    memo: dict[str, Built], settings: Settings, operator_image: str | None,
    body: dict[str, Any], policies: Mapping[str, AutoscalingPolicySpec], labels: dict[str, str] | None,
) -> Built:
    """Validate and build once per spec (generation), labels, annotations, policies and namespace labels;
    `memo` holds the last result per uid."""
    meta = body["metadata"]
    key = (meta.get("generation"), meta.get("resourceVersion") if not meta.get("generation") else None,
           tuple(sorted((meta.get("labels") or {}).items())), tuple(sorted((meta.get("annotations") or {}).items())))
    known = memo.get(meta["uid"])
    if known is not None and known.fits(key, policies, labels):
        return known
    result = validate({k: v for k, v in body.items() if k != "status"}, settings, dict(policies), labels)
    resource = result.resource
    built = Built(key, dict(policies), labels, resource, result.errors)
    if not result.errors and resource is not None:
        policy: AutoscalingPolicySpec | None = None
        policy_problems: list[Problem] = []
        if isinstance(resource, PoolingService | ScoringService):
            policy, policy_problems = _policy(resource, policies, labels)
        version, _ = resolve_version(resource.spec.engine.version, resource.spec.engine.image)
        build_ctx = BuildContext(policy=policy, **({"operator_image": operator_image} if operator_image else {}))
        desired = [with_hash(o) for o in build(resource, contract(version), build_ctx)] if not policy_problems else []  # type: ignore[arg-type]
        argv: list[str] = []
        workload = next((o for o in desired if o["kind"] == "Deployment"), None)
        if workload is not None:
            container = workload["spec"]["template"]["spec"]["containers"][0]
            argv = [*container["command"], *container["args"]]
        built = Built(key, dict(policies), labels, resource, [], policy, policy_problems, desired, argv)
    memo[meta["uid"]] = built
    return built


def _policy(
    resource: PoolingService | ScoringService, policies: Mapping[str, AutoscalingPolicySpec], labels: dict[str, str] | None
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


