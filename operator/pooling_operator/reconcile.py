"""parse -> build -> apply -> prune -> observe -> status, one function per kind, blind to which event fired.

Level-based: everything is derived from the resource's spec and the children observed now, as the watch-fed
cache (`k8s/cache.py`) holds them: a reconcile reads nothing from the API server (but a Namespace's labels when
a policy selects namespaces, and a Job's refusal events while it has no pod). Writes happen only where observed
differs from desired, and what was validated and built is kept per resource until its spec, labels or policy
change, so a reconcile of an unchanged resource serialises nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import Counter, Histogram

from pooling_operator.api import HiddenStateJob, PoolingService, ScoringService
from pooling_operator.api import messages as M
from pooling_operator.api.policy import AutoscalingPolicySpec, policy_for, policy_name_for, selects
from pooling_operator.api.problems import Problem
from pooling_operator.api.services import AutoscalingSpec
from pooling_operator.autoscaling.loop import Autoscaler
from pooling_operator.autoscaling.scale import clear_status
from pooling_operator.builders import BuildContext, build
from pooling_operator.builders.diff import needs_apply, with_hash
from pooling_operator.k8s.api import AUTOSCALER_FIELD_MANAGER, KINDS, ApiError, Kube
from pooling_operator.k8s.api import FIELD_MANAGER as FIELD_MANAGER_NAME
from pooling_operator.k8s.api import TransientError as TransientApiError
from pooling_operator.k8s.cache import Cache, owner_key, replica_managers
from pooling_operator.status import conditions
from pooling_operator.status import conditions as C
from pooling_operator.status.jobs import job_status
from pooling_operator.status.services import (
    degraded_by_time,
    embedding_fingerprint,
    invalid_status,
    service_status,
)
from pooling_operator.vllm.contract import contract, resolve_version
from pooling_operator.vllm.rules import Settings
from pooling_operator.vllm.validate import validate

log = logging.getLogger(__name__)

RECONCILES = Counter("vllm_pooling_operator_reconciles", "Reconciles run.", ["kind", "result"])
WRITES = Counter("vllm_pooling_operator_writes", "Objects created, changed or deleted.", ["kind", "action"])
DURATION = Histogram(
    "vllm_pooling_operator_reconcile_duration_seconds", "Time of one reconcile.", ["kind"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CATCH_UP_SECONDS = 10.0
SERVICE_CHILDREN = ("Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor", "PodMonitor", "ScaledObject")
JOB_CHILDREN = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job")


@dataclass
class Context:
    """What a reconcile needs besides the object: the API, operator settings and the known policies."""

    kube: Kube
    cache: Cache = field(default_factory=Cache)
    settings: Settings = field(default_factory=Settings)
    operator_image: str | None = None
    namespaces: list[str] = field(default_factory=list)
    identity: str = ""
    failures: dict[str, int] = field(default_factory=dict)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    warned: set[tuple[str, str]] = field(default_factory=set)  # (uid, reason) of one-off warnings
    memo: dict[str, Built] = field(default_factory=dict)  # uid -> what its spec validated and built to
    catching_up: dict[str, float] = field(default_factory=dict)  # uid -> since when its Deployment's controller lags
    autoscaler: Autoscaler | None = None

    def forget(self, uid: str) -> None:
        """Drop the per-object state of a resource that is gone."""
        self.memo.pop(uid, None)
        self.catching_up.pop(uid, None)
        self.warned = {w for w in self.warned if w[0] != uid}

    def background(self, coro: Any) -> None:
        """Run a coroutine on the loop, keeping a reference so it is not garbage-collected mid-flight."""
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


class InvalidSpec(Exception):
    """The resource breaks a rule; it is not retried until its spec changes."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems if p.severity == "error"))
        self.problems = problems


class Gone(Exception):
    """The resource or its namespace went away while it was being reconciled: nothing left to do."""


def _is_gone(exc: ApiError) -> bool:
    return exc.status == 404 or (exc.status == 403 and "NamespaceTerminating" in exc.body)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ref(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")


async def reconcile_service(ctx: Context, body: dict[str, Any], policies: Mapping[str, AutoscalingPolicySpec]) -> dict[str, Any]:
    """Bring a resource (PoolingService, ScoringService, HiddenStateJob), as the cache holds it, and its
    children to the desired state; returns the status. The caller never runs two reconciles of one resource
    at once (the work queue)."""
    kind = body.get("kind", "?")
    started = time.monotonic()
    try:
        if kind == "HiddenStateJob":
            status = await _reconcile_job(ctx, body)
        else:
            status = await _reconcile_service(ctx, body, policies)
    except ApiError as exc:
        if not _is_gone(exc):
            RECONCILES.labels(kind, "error").inc()
            raise
        RECONCILES.labels(kind, "gone").inc()
        raise Gone(str(exc)) from exc
    except InvalidSpec:
        RECONCILES.labels(kind, "invalid").inc()
        raise
    finally:
        DURATION.labels(kind).observe(time.monotonic() - started)
    RECONCILES.labels(kind, "ok").inc()
    return status


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


def _built(ctx: Context, body: dict[str, Any], policies: Mapping[str, AutoscalingPolicySpec], labels: dict[str, str] | None) -> Built:
    """Validate and build once per spec (generation), labels, annotations, policies and namespace labels."""
    meta = body["metadata"]
    key = (meta.get("generation"), meta.get("resourceVersion") if not meta.get("generation") else None,
           tuple(sorted((meta.get("labels") or {}).items())), tuple(sorted((meta.get("annotations") or {}).items())))
    known = ctx.memo.get(meta["uid"])
    if known is not None and known.fits(key, policies, labels):
        return known
    result = validate({k: v for k, v in body.items() if k != "status"}, ctx.settings, dict(policies), labels)
    resource = result.resource
    built = Built(key, dict(policies), labels, resource, result.errors)
    if not result.errors and resource is not None:
        policy: AutoscalingPolicySpec | None = None
        policy_problems: list[Problem] = []
        if isinstance(resource, PoolingService | ScoringService):
            policy, policy_problems = _policy(resource, policies, labels)
        version, _ = resolve_version(resource.spec.engine.version, resource.spec.engine.image)
        build_ctx = BuildContext(policy=policy, **({"operator_image": ctx.operator_image} if ctx.operator_image else {}))
        desired = [with_hash(o) for o in build(resource, contract(version), build_ctx)] if not policy_problems else []  # type: ignore[arg-type]
        argv: list[str] = []
        workload = next((o for o in desired if o["kind"] == "Deployment"), None)
        if workload is not None:
            container = workload["spec"]["template"]["spec"]["containers"][0]
            argv = [*container["command"], *container["args"]]
        built = Built(key, dict(policies), labels, resource, [], policy, policy_problems, desired, argv)
    ctx.memo[meta["uid"]] = built
    return built


async def _reconcile_service(ctx: Context, body: dict[str, Any], policies: Mapping[str, AutoscalingPolicySpec]) -> dict[str, Any]:
    meta = body["metadata"]
    old_status = body.get("status") or {}
    generation = meta.get("generation")
    # The policy index is the cluster's whole truth here: a policyRef to a missing policy is an error. The
    # namespace's labels decide which policies apply (namespaceSelector), for the rules and the autoscaler alike.
    labels = await _namespace_labels(ctx, meta.get("namespace"), policies)
    built = _built(ctx, body, policies, labels)
    resource = built.resource
    problems, reason = built.problems, C.INVALID_SPEC
    if not problems and isinstance(resource, PoolingService):
        problems, reason = _embedding_space_problems(resource, old_status), C.EMBEDDING_SPACE_CHANGED
    if not problems and built.policy_problems:
        problems, reason = built.policy_problems, C.POLICY_NOT_ALLOWED
    if problems or resource is None:
        status = invalid_status(generation, problems, reason if resource is not None else C.INVALID_SPEC)
        if old_status.get("embeddingSpace"):
            status["embeddingSpace"] = old_status["embeddingSpace"]  # keep protecting the index
        await _write_status(ctx, body, old_status, status)
        await _stop_autoscaling(ctx, body)
        raise InvalidSpec(problems)
    assert isinstance(resource, PoolingService | ScoringService)

    version, _ = resolve_version(resource.spec.engine.version, resource.spec.engine.image)
    c = contract(version)  # type: ignore[arg-type]
    key = owner_key(body)
    observed = ctx.cache.children_of(key, SERVICE_CHILDREN, meta["uid"])
    current = await _converge_or_refuse(ctx, body, old_status, built.desired, observed)

    deployment = current.get(("Deployment", meta["name"]))
    pods = ctx.cache.pods_of(key)
    status = service_status(resource, c, built.argv, deployment, pods)
    degraded_by_time(status, old_status.get("conditions"), datetime.now(UTC), resource.spec.engine.startup_timeout_seconds)
    if _controller_catching_up(ctx, meta["uid"], deployment, old_status):
        return status  # not written: the Deployment controller's own status update follows in a moment
    await _write_status(ctx, body, old_status, status)
    autoscaling = resource.spec.autoscaling
    if ctx.autoscaler is not None and autoscaling is not None:
        ctx.autoscaler.track(resource, built.policy)
    if autoscaling is None or autoscaling.backend != "operator":
        await _stop_autoscaling(ctx, body, keep_tracking=autoscaling is not None)
    if status.get("unprotectedRoutes") and status["unprotectedRoutes"] != old_status.get("unprotectedRoutes"):
        await ctx.kube.event(
            body, "Warning", "RoutesNotProtected",
            "vLLM checks the API key only on /v1, /v2, /inference and /cohere; these routes answer without it: "
            + ", ".join(status["unprotectedRoutes"]) + ". Restrict them with a NetworkPolicy or a gateway.",
        )
    return status


def _controller_catching_up(ctx: Context, uid: str, deployment: dict[str, Any] | None, old_status: dict[str, Any]) -> bool:
    """True while the Deployment's generation is ahead of what its controller has observed, for at most
    CATCH_UP_SECONDS, on a service that already has a status. A Deployment's generation moves on any change
    of its spec *or annotations* (a platform's annotation too); until kube-controller-manager has looked, its
    status says nothing about the new spec, and writing Ready=False for those milliseconds would only flap
    the conditions and post events. Past the grace the status says so ("not yet taken up the new spec")."""
    if deployment is None or not old_status.get("conditions"):
        return False
    observed = ((deployment.get("status") or {}).get("observedGeneration") or 0)
    if observed >= (deployment["metadata"].get("generation") or 0):
        ctx.catching_up.pop(uid, None)
        return False
    since = ctx.catching_up.setdefault(uid, time.monotonic())
    return time.monotonic() - since < CATCH_UP_SECONDS


async def _reconcile_job(ctx: Context, body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    old_status = body.get("status") or {}
    built = _built(ctx, body, {}, None)
    if built.problems or built.resource is None:
        await _write_status(ctx, body, old_status, invalid_status(meta.get("generation"), built.problems))
        raise InvalidSpec(built.problems)
    resource = built.resource
    assert isinstance(resource, HiddenStateJob)
    key = owner_key(body)
    observed = ctx.cache.children_of(key, JOB_CHILDREN, meta["uid"])
    current = await _converge_or_refuse(ctx, body, old_status, built.desired, observed)
    job = current.get(("Job", meta["name"]))
    configmap = current.get(("ConfigMap", f"{meta['name']}-progress"))
    pods = ctx.cache.pods_of(key)
    refusals: list[dict[str, Any]] = []
    if job is not None and not pods and not (job.get("status") or {}).get("active"):
        # No pod at all: ask whether the Job controller was refused (quota, PodSecurity); one read, only then.
        fields = {"involvedObject.kind": "Job", "involvedObject.name": meta["name"], "reason": "FailedCreate"}
        refusals = [e for e in await ctx.kube.list(KINDS["Event"], meta.get("namespace"), {}, fields)
                    if (e.get("involvedObject") or {}).get("uid") == job["metadata"].get("uid")]
    status = job_status(resource, job, configmap, pods, refusals)
    await _write_status(ctx, body, old_status, status)
    return status


async def _namespace_labels(ctx: Context, namespace: str | None, policies: Mapping[str, AutoscalingPolicySpec]) -> dict[str, str] | None:
    """The namespace's labels when some policy selects namespaces (watched; one read if the watch does not
    know it), else None (every policy applies)."""
    if not any(p.namespace_selector for p in policies.values()):
        return None
    known = ctx.cache.namespace_labels(namespace or "default")
    if known is not None:
        return dict(known)
    ns = await ctx.kube.get(KINDS["Namespace"], None, namespace or "default")
    return dict(((ns or {}).get("metadata") or {}).get("labels") or {})


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


async def _stop_autoscaling(ctx: Context, body: dict[str, Any], *, keep_tracking: bool = False) -> None:
    """The operator no longer scales this service: forget it (unless it still counts towards the namespace's
    GPU budget, as a KEDA-scaled service does) and remove the autoscaler's status."""
    if ctx.autoscaler is None:
        return
    if keep_tracking:
        await clear_status(ctx.kube, body)
    else:
        await ctx.autoscaler.stopped_autoscaling(body)


def _embedding_space_problems(resource: PoolingService, old_status: dict[str, Any]) -> list[Problem]:
    """The embeddingSpace rule, for clusters where it was not enforced at admission."""
    old = old_status.get("embeddingSpace") or {}
    if not old.get("fingerprint"):
        return []
    if old.get("label") != resource.spec.embedding_space:
        return []
    if old["fingerprint"] == embedding_fingerprint(resource):
        return []
    return [Problem("spec.embeddingSpace", M.EMBEDDING_SPACE)]


async def _converge_or_refuse(
    ctx: Context, body: dict[str, Any], old_status: dict[str, Any], desired: list[dict[str, Any]],
    observed: dict[tuple[str, str], dict[str, Any]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """_converge, turning the API server's refusal of a child (a bad toleration, affinity or env source the
    user wrote in a free-form field) into SpecValid=False and an event instead of an endless retry."""
    try:
        return await _converge(ctx, body, desired, observed)
    except ApiError as exc:
        if exc.status not in (400, 422) or isinstance(exc, TransientApiError):
            raise
        message = _server_message(exc)
        problems = [Problem("spec", f"the API server refused a child object: {message}")]
        status = invalid_status(body["metadata"].get("generation"), problems, C.CHILD_REJECTED)
        if old_status.get("embeddingSpace"):
            status["embeddingSpace"] = old_status["embeddingSpace"]
        await _write_status(ctx, body, old_status, status)
        raise InvalidSpec(problems) from exc


def _server_message(exc: ApiError) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except ValueError:
        return exc.body[:500]


async def _converge(
    ctx: Context, body: dict[str, Any], desired: list[dict[str, Any]], observed: dict[tuple[str, str], dict[str, Any]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Apply what differs (`desired` carries the applied-hash annotation), delete what is no longer desired;
    returns the children as they are now. Every write is remembered by the cache until the watch shows it."""
    uid = body["metadata"]["uid"]
    current = dict(observed)
    wanted = {(o["kind"], o["metadata"]["name"]) for o in desired}
    for obj in desired:
        key = (obj["kind"], obj["metadata"]["name"])
        have = observed.get(key)
        if have is not None and obj["kind"] == "Job":
            continue  # a Job's pod template is immutable: created once, then only observed
        if not needs_apply(obj, have):
            continue
        if have is not None and obj["kind"] == "Deployment":
            await _hand_over_replicas(ctx, obj, have)
        try:
            current[key] = await ctx.kube.apply(obj)
            ctx.cache.wrote(current[key], parent=uid)
        except ApiError as exc:
            if exc.status == 404 and obj["kind"] in ("ServiceMonitor", "PodMonitor", "ScaledObject"):
                if (body["metadata"]["uid"], obj["kind"]) not in ctx.warned:
                    ctx.warned.add((body["metadata"]["uid"], obj["kind"]))
                    await ctx.kube.event(body, "Warning", "CRDMissing", f"Cannot create {obj['kind']}: its CRD is not installed.")
                continue
            raise
        action = "Created" if have is None else "Updated"
        WRITES.labels(obj["kind"], action.lower()).inc()
        log.info("%s %s", "Created" if have is None else "Applied", _ref(current[key]))
        await ctx.kube.event(body, "Normal", action, f"{action} {obj['kind']} {obj['metadata']['name']}.")
    for key, obj in observed.items():
        if key in wanted:
            continue
        await ctx.kube.delete(obj)
        ctx.cache.deleted(obj, parent=uid)
        current.pop(key, None)
        WRITES.labels(obj["kind"], "deleted").inc()
        log.info("Deleted %s", _ref(obj))
        await ctx.kube.event(body, "Normal", "Deleted", f"Deleted {obj['kind']} {obj['metadata']['name']}: no longer desired.")
    return current


async def _hand_over_replicas(ctx: Context, desired: dict[str, Any], observed: dict[str, Any]) -> None:
    """When autoscaling takes over, give the current replica count to the autoscaler's field manager
    before we stop setting it; otherwise dropping the field would reset the Deployment to 1 replica."""
    if "replicas" in desired["spec"] or FIELD_MANAGER_NAME not in replica_managers(observed):
        return
    meta = observed["metadata"]
    scale = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "spec": {"replicas": observed["spec"].get("replicas", 1)},
    }
    await ctx.kube.apply(scale, manager=AUTOSCALER_FIELD_MANAGER)
    log.info("Handed the replicas of Deployment %s/%s to the autoscaler", meta["namespace"], meta["name"])


async def _write_status(ctx: Context, body: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> None:
    """Write status only when what the reconcile owns changed (the autoscaler's block and conditions belong to
    another field manager and are left out of the comparison and the apply); conditions keep their
    transition time unless they flipped."""
    old = {k: v for k, v in old.items() if k != "autoscaling"}
    _, old["conditions"] = C.split(old.get("conditions"), C.AUTOSCALER_TYPES)
    if not old["conditions"]:
        old.pop("conditions")
    new = dict(new)
    new["conditions"] = conditions.merge(old.get("conditions"), new["conditions"], now())
    if new == old:
        return
    meta = body["metadata"]
    patch = {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {"name": meta["name"], **({"namespace": meta["namespace"]} if meta.get("namespace") else {})},
        "status": new,
    }
    written = await ctx.kube.apply(patch, subresource="status")
    ctx.cache.wrote(written)
    WRITES.labels(body["kind"], "status").inc()
    for kind, reason, message in conditions.announced(old.get("conditions"), new["conditions"]):
        await ctx.kube.event(body, kind, reason, message)


async def reconcile_policies(ctx: Context, policy_bodies: list[dict[str, Any]], services: list[dict[str, Any]]) -> None:
    """Each policy's status: whether its spec holds, and how many services follow it (by policyRef, or as the
    default). Written only when it changed."""
    parsed: dict[str, AutoscalingPolicySpec] = {}
    problems: dict[str, list[Problem]] = {}
    for item in policy_bodies:
        result = validate({k: v for k, v in item.items() if k != "status"}, ctx.settings)
        problems[item["metadata"]["name"]] = result.errors
        if result.ok and result.resource is not None:
            parsed[item["metadata"]["name"]] = result.resource.spec  # type: ignore[assignment]
    counts = policy_counts(services, parsed)
    for item in policy_bodies:
        name, generation = item["metadata"]["name"], item["metadata"].get("generation")
        errors = problems.get(name) or []
        if errors:
            status = invalid_status(generation, errors)
        else:
            n = counts.get(name, 0)
            status = {
                "observedGeneration": generation,
                "conditions": [
                    conditions.condition(C.READY, True, C.AVAILABLE, f"{n} services follow this policy.", generation),
                    conditions.condition(C.SPEC_VALID, True, C.VALID, "Every rule holds.", generation),
                ],
                "services": n,
            }
        try:
            await _write_status(ctx, item, item.get("status") or {}, status)
        except ApiError as exc:
            log.info("Could not write the status of AutoscalingPolicy %s: %s", name, exc)


def policy_counts(services: list[dict[str, Any]], policies: Mapping[str, AutoscalingPolicySpec]) -> dict[str, int]:
    """Services (valid, autoscaled) per policy name they follow; namespace selectors of default policies are
    applied by the reconcile of each service, so a service outside them may be counted for a named policy it
    cannot use (its own status says so)."""
    counts: dict[str, int] = {}
    for body in services:
        raw = (body.get("spec") or {}).get("autoscaling")
        if not isinstance(raw, dict):
            continue
        try:
            autoscaling = AutoscalingSpec.model_validate(raw)
        except ValueError:
            continue
        name = policy_name_for(autoscaling, policies)
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return counts
