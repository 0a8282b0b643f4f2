"""Every child's name, in one place: what the operator calls each object it creates for a resource.

Most children carry their owner's own name: a service's Deployment, Service, PodDisruptionBudget and
ScaledObject, a job's Job, ServiceAccount, Role and RoleBinding.
A service's router (spec.routing) takes the suffix -router.
The others are built here and nowhere else; builders/, status/ and reconcile/ ask this module
(tests/test_child_names.py holds every rendered child to it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def progress_configmap(owner: str) -> str:
    """A HiddenStateJob's or PoolingJob's progress ConfigMap, which its driver patches."""
    return f"{owner}-progress"


def gpu_claim_template(owner: str, claim: str, request: dict[str, Any]) -> str:
    """`<workload>-<claim>-<8 hex>`, the hash of what the template requests. A ResourceClaimTemplate's spec is
    immutable (resource.k8s.io/v1 ResourceClaimTemplate.spec): a changed share is a new template, the rollout
    moves the pods to it, and the old one is deleted as no longer desired (claims made from it stay with their
    pods until those go)."""
    digest = hashlib.sha256(json.dumps(request, sort_keys=True).encode()).hexdigest()[:8]
    return f"{owner}-{claim}-{digest}"


def model_cache_claim(owner: str, named: str | None) -> str:
    """The claim a ModelCache lives on: the one it names, or the one created for it."""
    return named or f"model-cache-{owner}"


def router(owner: str) -> str:
    """A service's router (spec.routing): its Deployment, Service, ServiceAccount, Role and RoleBinding,
    `<service>-router`; past 63 characters (a Service's name is a DNS-1035 label) the owner's first 46, 8 hex of
    its whole name, then -router."""
    name = f"{owner}-router"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(owner.encode()).hexdigest()[:8]
    return f"{owner[:46]}-{digest}-router"


def fill_job(owner: str, model: str, revision: str, claim: str) -> str:
    """A ModelCache's fill Job: one per model, revision and claim, so a change of any fills again (a finished
    Job is never re-applied)."""
    digest = hashlib.sha256(f"{model}@{revision}:{claim}".encode()).hexdigest()[:8]
    return f"{owner[:48]}-fill-{digest}"
