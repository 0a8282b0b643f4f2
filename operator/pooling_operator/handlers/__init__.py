"""The thin kopf layer: decorators call reconcile; no logic here.

Importing this module registers the handlers with kopf's default registry.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import kopf

from pooling_operator import GROUP, VERSION
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.k8s.api import KINDS, ApiError, TransientError
from pooling_operator.reconcile import Context, Gone, InvalidSpec, reconcile_service

log = logging.getLogger(__name__)

PREFIX = "operator.vllm-pooling.io"
FINALIZER = f"{PREFIX}/finalizer"
MANAGED = {"app.kubernetes.io/managed-by": "vllm-pooling-operator"}
SERVICES = ("poolingservices", "scoringservices", "hiddenstatejobs")
OWNER_KINDS = ("PoolingService", "ScoringService", "HiddenStateJob")
RESYNC_SECONDS = max(1, int(float(os.environ.get("VPO_RESYNC_SECONDS", "60"))))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # kopf's own bookkeeping lives in annotations under our prefix, never in the status we own.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=PREFIX, key="last-handled-configuration")
    settings.persistence.finalizer = FINALIZER
    # We post our own events (child changes, condition flips); kopf's log-to-event posting would write
    # on every resync.
    settings.posting.enabled = False
    # The watch restarts (and kopf re-lists every object) this often: that is the resync.
    settings.watching.server_timeout = RESYNC_SECONDS
    settings.watching.client_timeout = RESYNC_SECONDS + 30
    settings.networking.request_timeout = 60


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


async def _run(body: kopf.Body, memo: kopf.Memo, index: kopf.Index[str, AutoscalingPolicySpec]) -> None:
    """Reconcile once. A user error is already in status and events: nothing to retry until the spec
    changes (the next event). A transient API error waits for the next event or resync."""
    ctx: Context = memo.ctx
    kind, meta = body["kind"], body["metadata"]
    try:
        await reconcile_service(ctx, _plain(body), _policies(index))
    except InvalidSpec as exc:
        log.info("Refused %s %s/%s: %s", kind, meta.get("namespace"), meta["name"], exc)
    except Gone:
        log.info("Skipped %s %s/%s: it or its namespace is being deleted", kind, meta.get("namespace"), meta["name"])
    except TransientError as exc:
        delay = _backoff(ctx, meta["uid"])
        log.warning("Will retry %s %s/%s in %.0fs: %s", kind, meta.get("namespace"), meta["name"], delay, exc)
        loop = asyncio.get_running_loop()
        ref = (kind, meta.get("namespace"), meta["name"], meta["uid"])
        loop.call_later(delay, lambda: ctx.background(_retry(ctx, index, *ref)))
    else:
        ctx.failures.pop(meta["uid"], None)


def _backoff(ctx: Context, uid: str) -> float:
    """Exponential backoff per object for transient API errors: 1, 2, 4 ... 60 s."""
    attempt = ctx.failures.get(uid, 0)
    ctx.failures[uid] = attempt + 1
    return float(min(60, 2**attempt))


async def _retry(ctx: Context, index: kopf.Index[str, AutoscalingPolicySpec], kind: str, namespace: str | None, name: str, uid: str) -> None:
    try:
        body = await ctx.kube.get(KINDS[kind], namespace, name)
    except TransientError:
        body = None
    if body is None or body["metadata"].get("uid") != uid or body["metadata"].get("deletionTimestamp"):
        return
    await _run(kopf.Body(body), kopf.Memo(ctx=ctx), index)


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
    # no-op then) and the re-list kopf does whenever the watch restarts (every RESYNC_SECONDS: the resync).
    # Event handlers need no finalizer and write no kopf bookkeeping onto the object, unlike change
    # handlers and timers; so deletion works while the operator is down.
    @kopf.on.event(GROUP, VERSION, _plural)
    async def reconcile_on_event(
        body: kopf.Body, memo: kopf.Memo, policies: kopf.Index[str, AutoscalingPolicySpec], type: str | None, **_: Any
    ) -> None:
        if type == "DELETED" or body["metadata"].get("deletionTimestamp"):
            return
        await _run(body, memo, policies)


@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf.on.event("batch", "v1", "jobs", labels=MANAGED)
@kopf.on.event("", "v1", "configmaps", labels=MANAGED)
async def child_changed(body: kopf.Body, memo: kopf.Memo, policies: kopf.Index[str, AutoscalingPolicySpec], type: str | None, **_: Any) -> None:
    """A child Deployment or Job, or a job's progress ConfigMap, changed (rollout, readiness, shard
    progress, hand edits): reconcile its owner now."""
    owner = next((r for r in body["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
    if owner is None or owner.get("kind") not in OWNER_KINDS:
        return
    ctx: Context = memo.ctx
    try:
        parent = await ctx.kube.get(KINDS[owner["kind"]], body["metadata"]["namespace"], owner["name"])
        if parent is None or parent["metadata"].get("uid") != owner.get("uid") or parent["metadata"].get("deletionTimestamp"):
            return
        await reconcile_service(ctx, parent, _policies(policies))
    except (InvalidSpec, Gone):
        return
    except ApiError as exc:
        if exc.status == 404:
            return
        raise
    except TransientError as exc:
        log.info("Deferred reconcile of %s/%s after a child change: %s", owner["kind"], owner["name"], exc)
