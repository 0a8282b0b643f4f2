"""The thin kopf layer: decorators call reconcile; no logic here.

Importing this module registers the handlers with kopf's default registry.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf

from pooling_operator import GROUP, VERSION
from pooling_operator.api.policy import DEFAULT_PROMETHEUS_URL, AutoscalingPolicySpec
from pooling_operator.autoscaling.loop import Autoscaler
from pooling_operator.k8s.api import KINDS, ApiError, TransientError
from pooling_operator.reconcile import Context, Gone, InvalidSpec, reconcile_policies, reconcile_service

log = logging.getLogger(__name__)

PREFIX = "operator.vllm-pooling.io"
FINALIZER = f"{PREFIX}/finalizer"
MANAGED = {"app.kubernetes.io/managed-by": "vllm-pooling-operator"}
SERVICES = ("poolingservices", "scoringservices", "hiddenstatejobs")
OWNER_KINDS = ("PoolingService", "ScoringService", "HiddenStateJob")
RESYNC_SECONDS = max(1, int(float(os.environ.get("VPO_RESYNC_SECONDS", "60"))))
AUTOSCALE_SECONDS = max(0.5, float(os.environ.get("VPO_AUTOSCALE_SECONDS", "15")))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
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
    # no-op then). Event handlers need no finalizer and write no kopf bookkeeping onto the object, unlike
    # change handlers and timers (kopf gives every timer a finalizer); so deletion works while the operator
    # is down. The periodic resync is the operator-wide loop below.
    @kopf.on.event(GROUP, VERSION, _plural)
    async def reconcile_on_event(
        body: kopf.Body, memo: kopf.Memo, policies: kopf.Index[str, AutoscalingPolicySpec], type: str | None, **_: Any
    ) -> None:
        if type == "DELETED" or body["metadata"].get("deletionTimestamp"):
            if memo.ctx.autoscaler is not None:
                memo.ctx.autoscaler.untrack(body["metadata"]["uid"])
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
    except TransientError as exc:
        delay = _backoff(ctx, owner["uid"])
        log.info("Will retry %s %s after a child change in %.0fs: %s", owner["kind"], owner["name"], delay, exc)
        ref = (owner["kind"], body["metadata"]["namespace"], owner["name"], owner["uid"])
        asyncio.get_running_loop().call_later(delay, lambda: ctx.background(_retry(ctx, policies, *ref)))
    except ApiError as exc:
        if exc.status != 404:
            raise


# ---- resync ------------------------------------------------------------------------------------------------
# kopf's watches resume from the last resourceVersion and never re-list, and its timers need finalizers, so
# the resync is one operator-wide loop: every RESYNC_SECONDS it lists the resources and reconciles each.
# A replica that kopf's peering pauses (another replica has a higher priority) skips its turn.


@kopf.on.startup()
async def start_resync(memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    memo.resync = asyncio.get_running_loop().create_task(_resync_forever(ctx))
    ctx.autoscaler = Autoscaler(
        ctx.kube, leading=lambda: _leading(ctx), period=AUTOSCALE_SECONDS,
        default_prometheus_url=os.environ.get("VPO_PROMETHEUS_URL", DEFAULT_PROMETHEUS_URL),
    )


@kopf.on.cleanup()
async def stop_resync(memo: kopf.Memo, **_: Any) -> None:
    task = getattr(memo, "resync", None)
    if task is not None:
        task.cancel()
    if memo.ctx.autoscaler is not None:
        await memo.ctx.autoscaler.close()


async def _leading(ctx: Context) -> bool:
    return not await _paused(ctx)


@kopf.on.event(GROUP, VERSION, "autoscalingpolicies")
async def policy_changed(memo: kopf.Memo, **_: Any) -> None:
    """A policy appeared, changed or went away: its services pick up the change now (not at the next resync),
    and every policy's status counts the services that follow it."""
    ctx: Context = memo.ctx
    if await _paused(ctx):
        return
    try:
        await resync_all(ctx)
    except TransientError as exc:
        log.info("Policy change deferred to the next resync: %s", exc)


async def _resync_forever(ctx: Context) -> None:
    while True:
        await asyncio.sleep(RESYNC_SECONDS)  # the resync period itself, not a wait for something
        try:
            if await _paused(ctx):
                continue
            await resync_all(ctx)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("Resync failed; the next one runs in %ss", RESYNC_SECONDS)


async def resync_all(ctx: Context) -> int:
    """Reconcile every resource the operator watches, then every policy's status; returns how many resources
    were visited."""
    policy_bodies = await ctx.kube.list(KINDS["AutoscalingPolicy"], None, {})
    policies: dict[str, AutoscalingPolicySpec] = {}
    for item in policy_bodies:
        try:
            policies[item["metadata"]["name"]] = AutoscalingPolicySpec.model_validate(item.get("spec") or {})
        except ValueError:
            continue
    bodies = []
    for kind in OWNER_KINDS:
        for namespace in ctx.namespaces or [None]:
            bodies += [b for b in await ctx.kube.list(KINDS[kind], namespace, {}) if not b["metadata"].get("deletionTimestamp")]
    limit = asyncio.Semaphore(8)

    async def one(body: dict[str, Any]) -> None:
        async with limit:
            try:
                await reconcile_service(ctx, body, policies)
            except (InvalidSpec, Gone):
                pass
            except TransientError as exc:
                log.info("Resync of %s %s/%s deferred: %s", body["kind"], body["metadata"].get("namespace"), body["metadata"]["name"], exc)

    await asyncio.gather(*(one(b) for b in bodies))
    await reconcile_policies(ctx, policy_bodies, bodies)
    return len(bodies)


async def _paused(ctx: Context) -> bool:
    """True when kopf's peering pauses this replica: another live peer has the same or a higher priority."""
    if ctx.peering is None:
        return False
    if ctx.namespaces:
        path = f"/apis/kopf.dev/v1/namespaces/{ctx.namespaces[0]}/kopfpeerings/{ctx.peering}"
    else:
        path = f"/apis/kopf.dev/v1/clusterkopfpeerings/{ctx.peering}"
    try:
        peering = await ctx.kube.request("GET", path)
    except ApiError as exc:
        if exc.status == 404:
            return False  # no peering object: kopf runs standalone too
        raise
    return others_outrank(peering.get("status") or {}, ctx.identity, ctx.priority, datetime.now(UTC))


def others_outrank(peers: dict[str, Any], identity: str, priority: int, now: datetime) -> bool:
    for peer_id, info in peers.items():
        if peer_id == identity or not isinstance(info, dict):
            continue
        try:
            lastseen = datetime.fromisoformat(str(info.get("lastseen")))
            alive = lastseen + timedelta(seconds=int(info.get("lifetime", 60))) > now
        except (TypeError, ValueError):
            continue
        if alive and int(info.get("priority", 0)) >= priority:
            return True
    return False
