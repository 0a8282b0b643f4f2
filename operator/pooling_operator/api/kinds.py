"""Every kind the operator reads or writes, once: API version, plural, scope, and what the operator does with it.

Our own kinds take their plural and scope from `resources.KINDS` (which also drives the CRDs); the others are
the Kubernetes and third-party kinds the operator creates as children or only reads. The API client's paths,
the watches kopf runs and the caches they feed are all derived from this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pooling_operator import GROUP, VERSION
from pooling_operator.api.kueue import API_VERSION as KUEUE_API_VERSION
from pooling_operator.api.resources import FAMILY_KINDS
from pooling_operator.api.resources import KINDS as RESOURCE_KINDS

Role = Literal["owner", "policy", "child", "pod", "namespace", "queue", "read"]


@dataclass(frozen=True)
class Kind:
    api_version: str
    kind: str
    plural: str
    namespaced: bool = True
    role: Role = "read"  # owner: reconciled; child: created and watched; pod, namespace, queue (Kueue's): watched;
    # read: on demand

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def path(self, namespace: str | None = None, name: str | None = None, subresource: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        if name:
            base += f"/{name}"
        if subresource:
            base += f"/{subresource}"
        return base


def _ours(kind: str) -> Kind:
    info = RESOURCE_KINDS[kind]
    return Kind(f"{GROUP}/{VERSION}", kind, info.plural, info.namespaced, "policy" if info.family == "policy" else "owner")


KINDS: dict[str, Kind] = {
    k.kind: k
    for k in (
        *(_ours(kind) for kind in RESOURCE_KINDS),
        Kind("apps/v1", "Deployment", "deployments", role="child"),
        Kind("batch/v1", "Job", "jobs", role="child"),
        Kind("v1", "Service", "services", role="child"),
        Kind("v1", "ConfigMap", "configmaps", role="child"),
        Kind("v1", "ServiceAccount", "serviceaccounts", role="child"),
        Kind("v1", "PersistentVolumeClaim", "persistentvolumeclaims", role="child"),
        Kind("policy/v1", "PodDisruptionBudget", "poddisruptionbudgets", role="child"),
        Kind("networking.k8s.io/v1", "NetworkPolicy", "networkpolicies", role="child"),
        Kind("rbac.authorization.k8s.io/v1", "Role", "roles", role="child"),
        Kind("rbac.authorization.k8s.io/v1", "RoleBinding", "rolebindings", role="child"),
        Kind("monitoring.coreos.com/v1", "ServiceMonitor", "servicemonitors", role="child"),
        Kind("monitoring.coreos.com/v1", "PodMonitor", "podmonitors", role="child"),
        Kind("keda.sh/v1alpha1", "ScaledObject", "scaledobjects", role="child"),
        Kind("http.keda.sh/v1beta1", "InterceptorRoute", "interceptorroutes", role="child"),  # the KEDA HTTP add-on's
        Kind("resource.k8s.io/v1", "ResourceClaimTemplate", "resourceclaimtemplates", role="child"),
        Kind("v1", "Pod", "pods", role="pod"),
        # Kueue's, read only (api/kueue.py): the Workload of a queued job's Job and the LocalQueue it names
        Kind(KUEUE_API_VERSION, "Workload", "workloads", role="queue"),
        Kind(KUEUE_API_VERSION, "LocalQueue", "localqueues", role="queue"),
        Kind("v1", "Secret", "secrets"),  # a policy's Prometheus credentials; the webhook's certificate (its own, by name)
        # the operator's own webhook registration: its caBundle is kept by the operator (runtime/webhook_certs.py)
        Kind("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", namespaced=False),
        Kind("v1", "Namespace", "namespaces", namespaced=False, role="namespace"),
        Kind("v1", "Event", "events"),
    )
}

OWNER_KINDS = tuple(k.kind for k in KINDS.values() if k.role == "owner")
CHILD_KINDS = tuple(k.kind for k in KINDS.values() if k.role == "child")
# The kinds whose reconcile makes a Job that Kueue may admit (spec.queue): a Workload's Job is their child.
QUEUED_KINDS = FAMILY_KINDS["job"]
# The kinds whose spec.embeddingSpace claims a label for one vector space in their namespace.
SPACE_KINDS = tuple(kind for kind, info in RESOURCE_KINDS.items() if info.claims_space)
# The kinds whose spec.autoscaling.front names hosts of the KEDA HTTP add-on (one host, one service: api/front_hosts.py).
FRONT_KINDS = FAMILY_KINDS["service"]
# The kinds that services and jobs mount (model.source.cache): a change of one concerns its users.
CACHE_KINDS = FAMILY_KINDS["cache"]
# Kinds whose CRDs may be absent (prometheus-operator, KEDA, its HTTP add-on): a 404 on them means "not installed".
OPTIONAL_KINDS = ("ServiceMonitor", "PodMonitor", "ScaledObject", "InterceptorRoute")


def kind_of(obj: dict[str, object]) -> Kind:
    return KINDS[str(obj["kind"])]
