"""PoolingService and ScoringService: their part of the flow (reconcile/flow.py).

Refused, in this order: the spec's own problems (InvalidSpec), a change of the embedding space without a new
label (EmbeddingSpaceChanged), the policy it would follow (PolicyNotAllowed, PolicyInvalid). Once converged,
the autoscaler is told to follow the service, or to stop, and a service whose API key leaves routes open says
so in an event.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from pooling_operator.api import messages as M
from pooling_operator.api.front_hosts import held_message
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import Service, SpaceClaimant, in_space
from pooling_operator.builders import names
from pooling_operator.k8s.api import KINDS
from pooling_operator.k8s.cache import owner_key
from pooling_operator.reconcile.built import built
from pooling_operator.reconcile.caches import cache_desired, mounted_cache
from pooling_operator.reconcile.context import Context
from pooling_operator.reconcile.flow import Children, Desired
from pooling_operator.reconcile.fronts import hosts_held_elsewhere
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.reconcile.spaces import space_problems
from pooling_operator.reconcile.state import Memory
from pooling_operator.status import conditions as C
from pooling_operator.status.exposition import Gauges, Histograms
from pooling_operator.status.services import (
    WHOLE_DEVICE,
    degraded_by_time,
    front_withheld,
    gpus_as_placed,
    placed_whole,
    service_status,
)
from pooling_operator.status.space import space_condition
from pooling_operator.status.startup import Startup, merged, pod_startups
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.workload import workload

CATCH_UP_SECONDS = 10.0
# Per service, so held as plain numbers (status/exposition.py): prometheus_client's own children cost 20 KiB a service.
STARTUP = Histograms(
    "vllm_pooling_operator_replica_startup_seconds",
    "Seconds from a replica's pod created to each start-up phase (status/startup.py): scheduled, initialized, "
    "started (the vLLM container), ready. phase=\"ready\" is the whole start-up.",
    ["kind", "namespace", "name", "phase"], buckets=(1, 2, 5, 10, 20, 30, 45, 60, 90, 120, 180, 240, 300, 450, 600, 900, 1200),
)
GPUS_HELD = Gauges(
    "vllm_pooling_operator_gpus_held",
    "GPUs a service's pods hold now, for chargeback: its Deployment's pods x what one pod holds (whole GPUs, or the "
    "fraction a share is, or a whole device where its DRA capacity request was dropped: status.services.gpus_as_placed). "
    "Dropped when the service goes.",
    ["kind", "namespace", "name"],
)
CHILDREN = (
    "ResourceClaimTemplate", "Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "PodMonitor", "ScaledObject",
    "InterceptorRoute", "NetworkPolicy", "ServiceAccount", "Role", "RoleBinding",  # the last three: the router's
)  # fmt: skip


class Services:
    children = CHILDREN

    async def desired(self, ctx: Context, memory: Memory, policies: PolicySet, body: dict[str, Any]) -> Desired:
        meta = body["metadata"]
        # The policy index is the cluster's whole truth here: a policyRef to a missing policy is an error. The
        # namespace's labels decide which policies apply (namespaceSelector), for the rules and the autoscaler alike.
        labels = await _namespace_labels(ctx, meta.get("namespace"), policies)
        cache, mount = mounted_cache(ctx, body)
        b = built(memory, ctx.settings, ctx.operator_image, body, policies, labels, mount)
        if b.problems or b.resource is None:
            return Desired(b, b.problems, C.INVALID_SPEC)
        resource = b.resource
        assert isinstance(resource, Service)  # the service family's reconciler (RECONCILERS)
        waiting = cache_desired(b, cache, mount)
        if waiting is not None:
            return waiting
        if in_space(resource):
            space = _embedding_space_problems(resource, body.get("status") or {})
            if space:
                return Desired(b, space, C.EMBEDDING_SPACE_CHANGED)
            if claimed := space_problems(ctx, body):
                return Desired(b, claimed, C.EMBEDDING_SPACE_CLAIMED)
        if b.policy_problems:
            return Desired(b, b.policy_problems, b.policy_reason)
        if held := await hosts_held_elsewhere(ctx, body, resource):
            return Desired(b, left_out=("InterceptorRoute",), why_left_out=held_message(held))
        return Desired(b)

    async def refused(self, ctx: Context, body: dict[str, Any]) -> None:
        if ctx.tracker is not None:
            await ctx.tracker.stop(body)

    async def status(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, current: Children,
                     old_status: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        meta = body["metadata"]
        plan, resource = desired.built.plan, desired.built.resource
        assert plan is not None and isinstance(resource, Service)
        deployment = current.get(("Deployment", meta["name"]))
        pods = ctx.cache.pods_of(owner_key(body))
        wanted = next((o["metadata"]["name"] for o in desired.built.desired if o["kind"] == "ResourceClaimTemplate"), None)
        template = current.get(("ResourceClaimTemplate", wanted)) if wanted else None  # not an old one still in use
        router = current.get(("Deployment", names.router(meta["name"]))) if resource.spec.routing is not None else None
        status = service_status(resource, plan.contract, plan.argv, deployment, pods, plan.workload, template,
                                ctx.settings.keda_http_interceptor, router)
        if desired.why_left_out is not None:
            front_withheld(status, resource, desired.why_left_out)
        if resource.spec.space_check is not None:
            status["conditions"].append(space_condition(pods, meta.get("generation")))
            if ctx.space is not None:
                for pod in pods:  # the gate checks each new pod once its vLLM is ready (runtime/space_gate.py)
                    ctx.space.consider(body, pod)
            known = (ctx.space.status_of(meta["uid"]) if ctx.space is not None else None) or old_status.get("spaceCheck")
            if known:
                status["spaceCheck"] = known
        degraded_by_time(status, old_status.get("conditions"), datetime.now(UTC), resource.spec.engine.startup_timeout_seconds)
        fresh = _fresh_startups(memory, meta["uid"], pods, old_status)
        startup = merged(old_status.get("startup"), fresh)
        if startup is not None:
            status["startup"] = startup
        # Not written while the Deployment controller catches up: its own status update follows in a moment.
        return status, not controller_catching_up(memory, meta["uid"], deployment, old_status)

    async def after(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, status: dict[str, Any],
                    old_status: dict[str, Any]) -> None:
        meta = body["metadata"]
        for sample in _fresh_startups(memory, meta["uid"], ctx.cache.pods_of(owner_key(body)), old_status, count=True):
            for phase, seconds in sample.phases.items():
                STARTUP.observe((body["kind"], meta.get("namespace", ""), meta["name"], phase), seconds)
        resource = desired.built.resource
        assert isinstance(resource, Service)
        whole_device = placed_whole(status)
        GPUS_HELD.set((body["kind"], meta.get("namespace", ""), meta["name"]),
                      (status.get("replicas") or 0) * gpus_as_placed(resource, whole_device))
        if whole_device and (meta["uid"], "GpuShareNotHonoured") not in memory.warned:
            memory.warned.add((meta["uid"], "GpuShareNotHonoured"))
            ctx.event(body, "Warning", "GpuShareNotHonoured", f"spec.resources.gpu.share.memory is not what each pod gets: {WHOLE_DEVICE}.")
        autoscaling = resource.spec.autoscaling
        if ctx.tracker is not None:
            if autoscaling is not None:
                ctx.tracker.track(resource, desired.built.policy)
            if autoscaling is None:
                await ctx.tracker.stop(body)
            elif autoscaling.backend != "operator":
                await ctx.tracker.clear_status(body)  # still counted towards its namespace's GPU budget
        held = desired.why_left_out
        if held is not None and (meta["uid"], f"{C.FRONT_HOST_CLAIMED} {held}") not in memory.warned:
            memory.warned.add((meta["uid"], f"{C.FRONT_HOST_CLAIMED} {held}"))  # once per message, not per reconcile
            ctx.event(body, "Warning", C.FRONT_HOST_CLAIMED, f"InterceptorRoute {meta['name']} not written: {held}.")
        elif held is None and autoscaling is not None and autoscaling.front is not None:  # held again later: said again
            memory.warned -= {w for w in memory.warned if w[0] == meta["uid"] and w[1].startswith(C.FRONT_HOST_CLAIMED)}
        if status.get("unprotectedRoutes") and status["unprotectedRoutes"] != old_status.get("unprotectedRoutes"):
            ctx.event(
                body, "Warning", "RoutesNotProtected",
                "vLLM checks the API key only on /v1, /v2, /inference and /cohere; these routes answer without it: "
                + ", ".join(status["unprotectedRoutes"]) + ". Restrict them with a NetworkPolicy or a gateway.",
            )


def forget_metrics(resource: object) -> None:
    """Drop a gone service's series (a gauge would otherwise keep charging its last value)."""
    if isinstance(resource, Service):
        labels = (resource.kind, resource.metadata.namespace or "", resource.metadata.name)
        GPUS_HELD.remove(labels)
        STARTUP.remove_prefix(labels)  # every phase's


def _fresh_startups(memory: Memory, uid: str, pods: list[dict[str, Any]], old_status: dict[str, Any], *,
                    count: bool = False) -> list[Startup]:
    """The start-ups of the service's Ready pods not measured before. The status step finds them (and keeps them
    pending); with `count`, once that status is written, exactly those pending ones are measured. After a
    restart the pods already there were measured by the replica that wrote the status: they are noted, not
    counted again."""
    if count:
        fresh = memory.pending_startups.pop(uid, [])
        alive = {p.uid for p in pod_startups(pods)}
        memory.started[uid] = (memory.started.get(uid, set()) | {f.uid for f in fresh}) & (alive | {f.uid for f in fresh})
        return fresh
    seen = memory.started.get(uid)
    present = pod_startups(pods)
    if seen is None and old_status.get("startup"):
        memory.started[uid] = {p.uid for p in present}
        memory.pending_startups.pop(uid, None)
        return []
    fresh = [p for p in present if p.uid not in (seen or set())]
    memory.pending_startups[uid] = fresh
    return fresh


def controller_catching_up(memory: Memory, uid: str, deployment: dict[str, Any] | None, old_status: dict[str, Any]) -> bool:
    """True while the Deployment's generation is ahead of what its controller has observed, for at most
    CATCH_UP_SECONDS, on a service that already has a status. A Deployment's generation moves on any change
    of its spec *or annotations* (a platform's annotation too); until kube-controller-manager has looked, its
    status says nothing about the new spec, and writing Ready=False for those milliseconds would only flap
    the conditions and post events. Past the grace the status says so ("not yet taken up the new spec")."""
    if deployment is None or not old_status.get("conditions"):
        return False
    observed = ((deployment.get("status") or {}).get("observedGeneration") or 0)
    if observed >= (deployment["metadata"].get("generation") or 0):
        memory.catching_up.pop(uid, None)
        return False
    since = memory.catching_up.setdefault(uid, time.monotonic())
    return time.monotonic() - since < CATCH_UP_SECONDS


async def _namespace_labels(ctx: Context, namespace: str | None, policies: PolicySet) -> dict[str, str] | None:
    """The namespace's labels when some policy selects namespaces (watched; one read if the watch does not
    know it), else None (every policy applies)."""
    if not any(p.namespace_selector for p in policies.valid.values()) and not any(policies.invalid_defaults.values()):
        return None
    known = ctx.cache.namespace_labels(namespace or "default")
    if known is not None:
        return dict(known)
    ns = await ctx.kube.get(KINDS["Namespace"], None, namespace or "default")
    return dict(((ns or {}).get("metadata") or {}).get("labels") or {})


def _embedding_space_problems(resource: SpaceClaimant, old_status: dict[str, Any]) -> list[Problem]:
    """The embeddingSpace rule, for clusters where it was not enforced at admission: the twin of the CEL rule, which
    compares the spec. The published fingerprint is the served one (builders.common.served); it is the spec's for a
    pinned model (a cache's commit must equal the pin), but a model read from a cache without a pin has no revision
    in its spec to compare (with a label a pin is required, storage_rules): its fingerprint may move with the
    cache, and an older operator published it unresolved."""
    old = old_status.get("embeddingSpace") or {}
    if not old.get("fingerprint"):
        return []
    if old.get("label") != resource.spec.embedding_space:
        return []
    source = resource.spec.model.source
    if source is not None and source.cache is not None and not resource.spec.model.revision:
        return []
    if old["fingerprint"] == embedding_fingerprint(workload(resource)):
        return []
    return [Problem("spec.embeddingSpace", M.EMBEDDING_SPACE)]


SERVICES = Services()
