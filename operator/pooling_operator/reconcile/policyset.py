"""AutoscalingPolicies parsed once with every rule: followed only when they hold.

A policy that breaks its rules is followed by no service: a service that names it, or would follow it as the
namespace's default, is refused with `SpecValid=False` reason `PolicyInvalid` naming the policy (its running
children are kept), instead of running under guardrails that were never checked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pooling_operator.api.autoscaling import AutoscalingSpec
from pooling_operator.api.policy import AutoscalingPolicySpec, policy_name_for, selects
from pooling_operator.api.problems import Problem
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate


@dataclass(frozen=True)
class PolicySet:
    """Every policy as watched, judged by the full rules once per resourceVersion."""

    version: tuple[tuple[str, str], ...] = ()
    valid: dict[str, AutoscalingPolicySpec] = field(default_factory=dict)
    invalid: dict[str, list[Problem]] = field(default_factory=dict)  # name -> its errors
    # name -> (default, namespaceSelector) of the invalid ones, as written: which services would follow them
    invalid_defaults: dict[str, Mapping[str, Any] | None] = field(default_factory=dict)

    def broken_for(self, autoscaling: AutoscalingSpec | None, namespace: str | None,
                   labels: Mapping[str, str] | None) -> Problem | None:
        """The problem of a service that would follow an invalid policy: the one it names, or the only default
        selecting its namespace when no valid default does."""
        if autoscaling is None:
            return None
        ref = autoscaling.policy_ref
        if ref is not None:
            name = ref.name if ref.name in self.invalid else None
        elif policy_name_for(autoscaling, self.valid, labels) is None:
            broken = [n for n, selector in sorted(self.invalid_defaults.items()) if labels is None or selects(selector, labels)]
            name = broken[0] if len(broken) == 1 else None
        else:
            name = None
        if name is None:
            return None
        first = self.invalid[name][0]
        how = "it names" if ref is not None else f"the default policy of namespace {namespace!r}"
        return Problem(
            "spec.autoscaling.policyRef.name" if ref is not None else "spec.autoscaling",
            f"AutoscalingPolicy {name!r} ({how}) breaks its own rules, so no service follows it: {first} (see its "
            "status); fix the policy, or name another",
        )


def policy_set(bodies: list[dict[str, Any]], settings: Settings, known: PolicySet | None) -> PolicySet:
    """The policies judged by every rule; `known` is reused while no policy's resourceVersion moved."""
    version = tuple(sorted((b["metadata"]["name"], str(b["metadata"].get("resourceVersion"))) for b in bodies))
    if known is not None and known.version == version:
        return known
    valid: dict[str, AutoscalingPolicySpec] = {}
    invalid: dict[str, list[Problem]] = {}
    defaults: dict[str, Mapping[str, Any] | None] = {}
    for body in bodies:
        name = body["metadata"]["name"]
        result = validate({k: v for k, v in body.items() if k != "status"}, settings)
        if result.ok and result.resource is not None:
            valid[name] = result.resource.spec  # type: ignore[assignment]
            continue
        invalid[name] = result.errors
        spec = body.get("spec")
        if not isinstance(spec, dict):
            spec = {}
        if spec.get("default") is True:
            selector = spec.get("namespaceSelector")
            defaults[name] = selector if isinstance(selector, dict) else None
    return PolicySet(version, valid, invalid, defaults)
