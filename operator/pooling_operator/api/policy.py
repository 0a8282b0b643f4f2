"""AutoscalingPolicy: cluster-scoped guardrails and defaults set by the platform team."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import ConfigDict, Field, StringConstraints

from pooling_operator.api import messages as M
from pooling_operator.api.autoscaling import AutoscalingSpec, Backend, ScaleBehavior
from pooling_operator.api.base import StatusBase
from pooling_operator.api.cel import cel, validations
from pooling_operator.api.schema import Duration, Name, ObjectDict, Spec, duration_seconds

DEFAULT_PROMETHEUS_URL = "http://prometheus-operated.monitoring:9090"


class NamespacedSecretKeyRef(Spec):
    """A key of a Secret in a named namespace (a policy is cluster-scoped). The operator may read Secrets only
    in its own namespace (deploy/rbac.yaml), so keep Prometheus credentials there."""

    namespace: Name = Field(description="Namespace of the Secret: the operator's own.")
    name: Name = Field(description="Name of the Secret.")
    key: str = Field(min_length=1, max_length=253, description="Key inside the Secret.")


class PrometheusSpec(Spec):
    """Where the autoscaler reads metrics, and how it authenticates."""

    url: str = Field(
        default=DEFAULT_PROMETHEUS_URL,
        pattern=r"^https?://[^\s]+$",
        description=f"Prometheus base URL. Default {DEFAULT_PROMETHEUS_URL}.",
    )
    bearer_token_secret_ref: NamespacedSecretKeyRef | None = Field(
        default=None, description="Secret key holding a bearer token sent as Authorization: Bearer."
    )
    ca_secret_ref: NamespacedSecretKeyRef | None = Field(
        default=None, description="Secret key holding the PEM CA bundle that signs Prometheus's certificate (https)."
    )
    timeout: Duration = Field(default="5s", description="Timeout of one query. Default 5s.")


class PolicyDefaults(Spec):
    """Targets used when a service leaves them unset."""

    queue_depth_per_replica: int = Field(
        default=16, ge=1, le=100000, description="Waiting requests per ready replica. Default 16."
    )
    p99_latency: Duration | None = Field(default=None, description="Target p99 latency, e.g. 500ms.")
    window: Duration = Field(default="60s", description="Query rate window. Default 60s.")
    scale_up: ScaleBehavior | None = Field(default=None, description="Default scale-up behaviour.")
    scale_down: ScaleBehavior | None = Field(default=None, description="Default scale-down behaviour.")


class PolicyLimits(Spec):
    """Caps no service may exceed."""

    max_replicas: int | None = Field(default=None, ge=1, le=10000, description="Most replicas of one service.")
    max_gp_us_per_namespace: int | None = Field(
        default=None, ge=0, le=100000, alias="maxGPUsPerNamespace", description="Most GPUs autoscaled services of one namespace may hold."
    )
    min_scale_down_stabilization_seconds: int | None = Field(
        default=None, ge=0, le=3600, description="Floor of every service's scaleDown.stabilizationSeconds."
    )


PRICE_PATTERN = r"^(0|[1-9][0-9]{0,5})(\.[0-9]{1,6})?$"  # a decimal string: "2.50", "0.35", "12"
Price = Annotated[str, StringConstraints(pattern=PRICE_PATTERN, max_length=13)]


class Pricing(Spec):
    """What a GPU-hour costs: turns each service's GPU-seconds into money (status.cost.pricePerMillionTokens)."""

    currency: str = Field(default="USD", pattern=r"^[A-Z]{3}$", description="ISO 4217 code of the prices, e.g. USD, EUR. Default USD.")
    gpu_hour: dict[str, Price] = Field(
        min_length=1, max_length=64,
        description="Price of one GPU-hour by GPU product, as spec.resources.gpu.product names it (e.g. "
        'NVIDIA-H100-80GB-HBM3: "2.50"), a decimal string. A service whose product is not listed, or that names '
        "none, reports GPU-seconds and no price. A GPU share costs its fraction.",
    )


def _every_backend() -> list[Backend]:
    return ["operator", "keda"]


class AutoscalingPolicySpec(Spec):
    """Guardrails and defaults for autoscaled services."""

    model_config = ConfigDict(
        json_schema_extra=validations(
            cel("!has(self.allowedBackends) || self.allowedBackends.size() > 0", M.ALLOWED_BACKENDS_NONEMPTY, ".allowedBackends")
        )
    )

    default: bool = Field(default=False, description="Applies to services that reference no policy.")
    namespace_selector: ObjectDict | None = Field(
        default=None, description="Namespaces (a LabelSelector) whose services may use the policy. Default: all."
    )
    prometheus: PrometheusSpec = Field(default_factory=PrometheusSpec, description=PrometheusSpec.__doc__)
    defaults: PolicyDefaults = Field(default_factory=PolicyDefaults, description=PolicyDefaults.__doc__)
    limits: PolicyLimits = Field(default_factory=PolicyLimits, description=PolicyLimits.__doc__)
    pricing: Pricing | None = Field(default=None, description=Pricing.__doc__)
    allowed_backends: list[Backend] = Field(
        default_factory=_every_backend,
        description="Backends services may choose. Default [operator, keda].",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )


class AutoscalingPolicyStatus(StatusBase):
    """Observed state of an AutoscalingPolicy."""

    services: int | None = Field(default=None, description="Services following this policy.")


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A Kubernetes LabelSelector (matchLabels, matchExpressions with In, NotIn, Exists, DoesNotExist) against
    labels; an empty or missing selector selects everything."""
    if not selector:
        return True
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        present = key in labels
        if op == "In" and not (present and labels[key] in values):
            return False
        if op == "NotIn" and present and labels[key] in values:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


def policy_name_for(
    autoscaling: AutoscalingSpec | None,
    policies: Mapping[str, AutoscalingPolicySpec],
    namespace_labels: Mapping[str, str] | None = None,
) -> str | None:
    """The name of the policy an autoscaled service follows: the one it names, else the single default that
    selects its namespace (when the namespace's labels are known); None when not autoscaled or none."""
    if autoscaling is None:
        return None
    if autoscaling.policy_ref is not None:
        return autoscaling.policy_ref.name if autoscaling.policy_ref.name in policies else None
    defaults = [
        name for name, p in sorted(policies.items())
        if p.default and (namespace_labels is None or selects(p.namespace_selector, namespace_labels))
    ]
    return defaults[0] if len(defaults) == 1 else None


def policy_for(
    autoscaling: AutoscalingSpec | None,
    policies: Mapping[str, AutoscalingPolicySpec],
    namespace_labels: Mapping[str, str] | None = None,
) -> AutoscalingPolicySpec | None:
    """The policy an autoscaled service follows (see policy_name_for)."""
    name = policy_name_for(autoscaling, policies, namespace_labels)
    return policies[name] if name is not None else None


# Defaults of the autoscaling behaviour (HPA's own for scale-down; a faster scale-up than HPA's 0 s/4 pods is
# not needed: stabilisation 0 s already reacts at the next period).
DEFAULT_QUEUE_DEPTH = 16
DEFAULT_WINDOW = "60s"
DEFAULT_UP = (0, 4)  # (stabilizationSeconds, maxStep)
DEFAULT_DOWN = (300, 1)
STEP_PERIOD_SECONDS = 15  # the period in which at most maxStep replicas are added or removed (HPA Pods policy)


@dataclass(frozen=True)
class AutoscalingTargets:
    """A service's autoscaling settings with the policy's defaults and caps resolved: what the built-in
    autoscaler, the KEDA ScaledObject and the simulator all read (one resolution, three readers)."""

    min_replicas: int
    max_replicas: int
    queue_per_replica: int = DEFAULT_QUEUE_DEPTH
    p99_seconds: float | None = None
    window: str = DEFAULT_WINDOW
    policy_max_replicas: int | None = None
    tolerance: float = 0.1
    up_window_seconds: int = DEFAULT_UP[0]
    up_max_step: int = DEFAULT_UP[1]
    down_window_seconds: int = DEFAULT_DOWN[0]
    down_max_step: int = DEFAULT_DOWN[1]
    up_step_set: bool = False  # scaleUp.maxStep given by the service or its policy's defaults
    down_window_set: bool = False  # scaleDown.stabilizationSeconds given likewise
    down_step_set: bool = False  # scaleDown.maxStep given likewise
    down_floor_seconds: int | None = None  # the policy's limits.minScaleDownStabilizationSeconds
    max_gpus_per_namespace: int | None = None
    prometheus: PrometheusSpec | None = None

    @property
    def effective_max(self) -> int:
        if self.policy_max_replicas is None:
            return self.max_replicas
        return min(self.max_replicas, self.policy_max_replicas)


def resolve_targets(autoscaling: AutoscalingSpec, policy: AutoscalingPolicySpec | None) -> AutoscalingTargets:
    """The service's own value, else the policy's default, else ours; the policy's floors and caps applied."""
    d = policy.defaults if policy else None

    def behavior(own: ScaleBehavior | None, fallback: ScaleBehavior | None, default: tuple[int, int]) -> tuple[int, int]:
        window = next((b.stabilization_seconds for b in (own, fallback) if b and b.stabilization_seconds is not None), default[0])
        step = next((b.max_step for b in (own, fallback) if b and b.max_step is not None), default[1])
        return window, step

    def given(attr: str, direction: str = "scale_down") -> bool:
        own, fallback = getattr(autoscaling, direction), getattr(d, direction) if d else None
        return any(b is not None and getattr(b, attr) is not None for b in (own, fallback))

    up = behavior(autoscaling.scale_up, d.scale_up if d else None, DEFAULT_UP)
    down = behavior(autoscaling.scale_down, d.scale_down if d else None, DEFAULT_DOWN)
    floor = policy.limits.min_scale_down_stabilization_seconds if policy else None
    if floor is not None:
        down = (max(down[0], floor), down[1])
    p99 = autoscaling.p99_latency or (d.p99_latency if d else None)
    return AutoscalingTargets(
        min_replicas=autoscaling.min_replicas,
        max_replicas=autoscaling.max_replicas,
        queue_per_replica=autoscaling.queue_depth_per_replica or (d.queue_depth_per_replica if d else DEFAULT_QUEUE_DEPTH),
        p99_seconds=duration_seconds(p99) if p99 else None,
        window=autoscaling.window or (d.window if d else DEFAULT_WINDOW),
        policy_max_replicas=policy.limits.max_replicas if policy else None,
        up_window_seconds=up[0],
        up_max_step=up[1],
        down_window_seconds=down[0],
        down_max_step=down[1],
        up_step_set=given("max_step", "scale_up"),
        down_window_set=given("stabilization_seconds"),
        down_step_set=given("max_step"),
        down_floor_seconds=floor,
        max_gpus_per_namespace=policy.limits.max_gp_us_per_namespace if policy else None,
        prometheus=policy.prometheus if policy else None,
    )
