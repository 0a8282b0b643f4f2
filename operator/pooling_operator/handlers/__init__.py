"""The thin kopf layer: decorators hand events to the runtime; no logic here.

Importing this module registers the handlers with kopf's default registry. Every handler is an event handler
(no finalizers, no kopf annotations on objects: kopf's change handlers and timers would add them), so deleting
a resource works while the operator is down.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from pooling_operator import GROUP, VERSION
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.builders.common import MANAGED_LABELS
from pooling_operator.runtime import Runtime

log = logging.getLogger(__name__)

PREFIX = "operator.vllm-pooling.io"
FINALIZER = f"{PREFIX}/finalizer"
SERVICES = ("poolingservices", "scoringservices", "hiddenstatejobs")
# Every kind the operator owns, and pods (status reads them): a child deleted or edited by hand is put back at
# once, not at the next resync. Kinds whose CRD is absent (prometheus-operator, KEDA) are simply not served.
CHILDREN = (
    ("apps", "v1", "deployments"),
    ("batch", "v1", "jobs"),
    ("", "v1", "services"),
    ("", "v1", "configmaps"),
    ("", "v1", "serviceaccounts"),
    ("", "v1", "pods"),
    ("policy", "v1", "poddisruptionbudgets"),
    ("rbac.authorization.k8s.io", "v1", "roles"),
    ("rbac.authorization.k8s.io", "v1", "rolebindings"),
    ("monitoring.coreos.com", "v1", "servicemonitors"),
    ("monitoring.coreos.com", "v1", "podmonitors"),
    ("keda.sh", "v1alpha1", "scaledobjects"),
)


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # kopf's own bookkeeping lives in annotations under our prefix, never in the status we own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX, key="last-handled-configuration")
    settings.persistence.finalizer = FINALIZER
    # We post our own events (child changes, condition flips); kopf's log-to-event posting would write
    # on every resync.
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.networking.request_timeout = 60
    if memo.get("webhook"):  # served only; the cluster registers it (the Helm chart)
        settings.admission.server = kopf.WebhookServer(**memo.webhook)
        settings.admission.managed = None
    runtime: Runtime = memo.runtime
    await runtime.start()


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    await memo.runtime.stop()


@kopf.index(GROUP, VERSION, "autoscalingpolicies")
def policies(name: str, spec: kopf.Spec, **_: Any) -> dict[str, AutoscalingPolicySpec]:
    """Known policies by name, kept current by kopf's watch (what validation and builders read)."""
    try:
        return {name: AutoscalingPolicySpec.model_validate(dict(spec))}
    except ValueError:
        log.warning("Ignored AutoscalingPolicy %s: its spec does not parse", name)
        return {}


def _policies(index: kopf.Index[str, AutoscalingPolicySpec]) -> dict[str, AutoscalingPolicySpec]:
    return {name: next(iter(store)) for name, store in index.items() if store}


def _plain(body: kopf.Body) -> dict[str, Any]:
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": dict(body["metadata"]),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


for _plural in SERVICES:

    # One level-based handler for every event of the resource: creation, change, our own status writes (a
    # no-op then), deletion (state dropped).
    @kopf.on.event(GROUP, VERSION, _plural)
    async def reconcile_on_event(
        body: kopf.Body, memo: kopf.Memo, policies: kopf.Index[str, AutoscalingPolicySpec], type: str | None, **_: Any
    ) -> None:
        await memo.runtime.on_resource(_plain(body), type == "DELETED", _policies(policies))


for _group, _version, _child in CHILDREN:

    @kopf.on.event(_group, _version, _child, labels=MANAGED_LABELS)
    async def child_changed(body: kopf.Body, memo: kopf.Memo, policies: kopf.Index[str, AutoscalingPolicySpec], **_: Any) -> None:
        await memo.runtime.on_child(dict(body), _policies(policies))


@kopf.on.event(GROUP, VERSION, "autoscalingpolicies")
async def policy_changed(memo: kopf.Memo, **_: Any) -> None:
    """A policy appeared, changed or went away: its services pick up the change now (not at the next resync),
    and every policy's status counts the services that follow it."""
    memo.runtime.request_resync()
