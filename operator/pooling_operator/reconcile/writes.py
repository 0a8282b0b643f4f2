"""The writes of a reconcile: children applied in waves (what other children name first), what is no longer desired
deleted, a child the API server refuses raised as ChildRefused, a name another object holds raised as ChildTaken
(nothing written over it, nothing that names it written), and status written only when it changed."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from pooling_operator import OPERATOR_IMAGE
from pooling_operator.api.clock import rfc3339
from pooling_operator.api.kinds import OPTIONAL_KINDS, kind_of
from pooling_operator.api.problems import Problem
from pooling_operator.builders.diff import HASH_ANNOTATION, needs_apply
from pooling_operator.builders.ownership import held_by
from pooling_operator.builders.upgrade import steady
from pooling_operator.k8s.api import (
    AUTOSCALER_FIELD_MANAGER,
    AUTOSCALER_STATUS,
    FIELD_MANAGER,
    ApiError,
    TransientError,
    status_patch,
)
from pooling_operator.k8s.cache import owner_key, replica_managers
from pooling_operator.reconcile.context import WRITES, Context, _ref
from pooling_operator.reconcile.state import Memory
from pooling_operator.status import conditions as C

log = logging.getLogger(__name__)

# Children go out in waves, each once the one before was answered and every name it asked for was free: what other
# children name comes first (the ServiceAccount, Role and ConfigMap a Job's pods and RoleBinding name, a ModelCache's
# claim, the claim template a Deployment's pods name), the ScaledObject after the Deployment it scales and a Job
# after the RoleBinding its pods need (the API server answers a RoleBinding created beside its Role with 404 while
# it checks the binding against a Role it cannot find yet). A name another object holds stops the later waves:
# nothing is written that would point at someone else's object.
FIRST_WAVE = ("ServiceAccount", "Role", "ConfigMap", "PersistentVolumeClaim", "ResourceClaimTemplate")
LAST_WAVE = ("Job", "ScaledObject")


def wave_of(kind: str) -> int:
    return 0 if kind in FIRST_WAVE else 2 if kind in LAST_WAVE else 1


class ChildRefused(Exception):
    """The API server refused a child built from the spec (a bad toleration, affinity or env source the user
    wrote in a free-form field): a user's mistake to report (ChildRejected), not to retry."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems


class ChildTaken(Exception):
    """Names the reconcile would create are held by objects it does not control: (kind, name, who holds it)."""

    def __init__(self, taken: list[tuple[str, str, str]]) -> None:
        super().__init__("; ".join(f"{k} {n} exists {who}" for k, n, who in taken))
        self.taken = taken


def _server_message(exc: ApiError) -> str:
    try:
        return str(json.loads(exc.body).get("message", exc.body))
    except ValueError:
        return exc.body[:500]


async def converge(
    ctx: Context, memory: Memory, body: dict[str, Any], desired: list[dict[str, Any]],
    observed: dict[tuple[str, str], dict[str, Any]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """Apply what differs (`desired` carries the applied-hash annotation), delete what is no longer desired;
    returns the children as they are now. Every write is remembered by the cache until the watch shows it.

    The applies of one wave go out together (a Deployment does not wait for its Service; wave_of). The first
    refusal is raised once every apply of its wave has been answered: ChildRefused when the API server refused a
    child for what the spec says, ChildTaken when a name is held by an object the resource does not control (no
    later wave is written, nothing is deleted)."""
    try:
        return await _converge(ctx, memory, body, desired, observed)
    except ApiError as exc:
        if exc.status not in (400, 422, 500) or isinstance(exc, TransientError):  # a lasting 500: see k8s.api.classify
            raise
        raise ChildRefused([Problem("spec", f"the API server refused a child object: {_server_message(exc)}")]) from exc


async def _converge(
    ctx: Context, memory: Memory, body: dict[str, Any], desired: list[dict[str, Any]],
    observed: dict[tuple[str, str], dict[str, Any]],
) -> dict[tuple[str, str], dict[str, Any]]:
    uid = body["metadata"]["uid"]
    image = ctx.operator_image or OPERATOR_IMAGE
    # what runs the operator's image keeps the one it runs, unless its pods roll anyway (builders/upgrade.py)
    desired = [steady(o, observed.get((o["kind"], o["metadata"]["name"])), image) for o in desired]
    current = dict(observed)
    wanted = {(o["kind"], o["metadata"]["name"]) for o in desired}
    todo = [o for o in desired if _differs(memory, uid, o, observed.get((o["kind"], o["metadata"]["name"])))
            and not (o["kind"] == "Job" and (o["kind"], o["metadata"]["name"]) in observed)]  # a Job's template is immutable
    done: dict[str, list[str]] = {"Created": [], "Updated": []}
    try:
        for n in range(3):
            wave = [o for o in todo if wave_of(o["kind"]) == n]
            results = await asyncio.gather(*(_apply_child(ctx, memory, body, o, observed) for o in wave), return_exceptions=True)
            refused = [r for r in results if isinstance(r, BaseException) and not isinstance(r, ChildTaken)]
            taken = [t for r in results if isinstance(r, ChildTaken) for t in r.taken]
            for obj, result in zip(wave, results, strict=True):
                if isinstance(result, dict):
                    key = (obj["kind"], obj["metadata"]["name"])
                    current[key] = result
                    done["Updated" if key in observed else "Created"].append(f"{obj['kind']} {obj['metadata']['name']}")
            if refused:
                raise refused[0]
            if taken:
                raise ChildTaken(taken)
    finally:
        for action, what in done.items():  # one event per action and reconcile, naming every child
            if what:
                ctx.event(body, "Normal", action, f"{action} {_and(what)}.")
    gone = [(key, obj) for key, obj in observed.items() if key not in wanted]
    if any(kind == "ResourceClaimTemplate" for (kind, _), _ in gone):
        named = templates_in_use(ctx.cache.pods_of(owner_key(body)))
        # a pod of the old ReplicaSet, recreated before the rollout ends, needs its template for its claim
        gone = [(key, obj) for key, obj in gone if not (key[0] == "ResourceClaimTemplate" and key[1] in named)]
    for key, obj in gone:
        await ctx.kube.delete(obj)
        ctx.cache.deleted(obj, parent=uid)
        current.pop(key, None)
        WRITES.labels(obj["kind"], "deleted").inc()
        log.info("Deleted %s", _ref(obj))
        ctx.event(body, "Normal", "Deleted", f"Deleted {obj['kind']} {obj['metadata']['name']}: no longer desired.")
    return current


def templates_in_use(pods: list[dict[str, Any]]) -> set[str]:
    """The ResourceClaimTemplates the owner's pods were made with (a changed DRA share is a new template: the old
    one stays until no pod names it)."""
    return {c["resourceClaimTemplateName"] for p in pods for c in (p.get("spec") or {}).get("resourceClaims") or []
            if c.get("resourceClaimTemplateName")}


def _differs(memory: Memory, uid: str, obj: dict[str, Any], have: dict[str, Any] | None) -> bool:
    """needs_apply, remembered: a child found equal at a resourceVersion stays equal until it or what we want
    of it (its applied-hash) changes, so a reconcile after a pod event compares nothing again."""
    if have is None:
        return True
    key = (obj["kind"], obj["metadata"]["name"])
    mark = (str(have["metadata"].get("resourceVersion")), obj["metadata"]["annotations"].get(HASH_ANNOTATION, ""))
    seen = memory.verified.get(uid)
    if seen is not None and seen.get(key) == mark:
        return False
    if needs_apply(obj, have):
        return True
    memory.verified.setdefault(uid, {})[key] = mark
    return False


async def _apply_child(
    ctx: Context, memory: Memory, body: dict[str, Any], obj: dict[str, Any], observed: dict[tuple[str, str], dict[str, Any]]
) -> dict[str, Any] | None:
    """One child applied; None when its CRD is not installed (told once per resource)."""
    uid = body["metadata"]["uid"]
    have = observed.get((obj["kind"], obj["metadata"]["name"]))
    if have is not None and obj["kind"] == "Deployment":
        await _hand_over_replicas(ctx, obj, have)
    try:
        # a child the cache does not know as ours is created, never applied over what holds its name
        result = await ctx.kube.apply(obj, create=have is None)
    except ApiError as exc:
        if exc.status == 404 and obj["kind"] in OPTIONAL_KINDS:
            if (uid, obj["kind"]) not in memory.warned:
                memory.warned.add((uid, obj["kind"]))
                ctx.event(body, "Warning", "CRDMissing", f"Cannot create {obj['kind']}: its CRD is not installed.")
            return None
        if exc.status != 409 or have is not None:
            raise
        found = await ctx.kube.get(kind_of(obj), obj["metadata"].get("namespace"), obj["metadata"]["name"])
        who = None if found is None else held_by(found, body)
        if who is not None:
            raise ChildTaken([(obj["kind"], obj["metadata"]["name"], who)]) from None
        # gone meanwhile, ours though the cache had not seen it yet, or our predecessor's: applied as before
        result = await ctx.kube.apply(obj)
    ctx.cache.wrote(result, parent=uid)
    # What the server made of our apply is what we want of it until it or our intent changes: a field it drops
    # (one behind a feature gate that is off) must not make every reconcile apply again.
    key = (obj["kind"], obj["metadata"]["name"])
    memory.verified.setdefault(uid, {})[key] = (str(result["metadata"].get("resourceVersion")), obj["metadata"]["annotations"].get(HASH_ANNOTATION, ""))
    action = "Created" if have is None else "Updated"
    WRITES.labels(obj["kind"], action.lower()).inc()
    log.info("%s %s", "Created" if have is None else "Applied", _ref(result))
    return result


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


async def _hand_over_replicas(ctx: Context, desired: dict[str, Any], observed: dict[str, Any]) -> None:
    """When autoscaling takes over, give the current replica count to the autoscaler's field manager
    before we stop setting it; otherwise dropping the field would reset the Deployment to 1 replica."""
    if "replicas" in desired["spec"] or FIELD_MANAGER not in replica_managers(observed):
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


async def write_status(ctx: Context, body: dict[str, Any], old: dict[str, Any], new: dict[str, Any]) -> None:
    """Write status only when what the reconcile owns changed (the autoscaler's block and conditions belong to
    another field manager and are left out of the comparison and the apply); conditions keep their
    transition time unless they flipped."""
    old = {k: v for k, v in old.items() if k not in AUTOSCALER_STATUS}
    _, old["conditions"] = C.split(old.get("conditions"), C.AUTOSCALER_TYPES)
    if not old["conditions"]:
        old.pop("conditions")
    new = dict(new)
    new["conditions"] = C.merge(old.get("conditions"), new["conditions"], rfc3339())
    if new == old:
        return
    meta = body["metadata"]
    patch = status_patch(body, new)
    announced = C.announced(old.get("conditions"), new["conditions"])
    try:
        written = await ctx.kube.apply(patch, subresource="status")
    except ApiError as exc:
        if isinstance(exc, TransientError) or exc.status not in (400, 413, 422, 500):
            raise
        # Refused for what it holds (too large, or a value the API server will not store): keep a condition that
        # says so, rather than no status at all and a retry every minute for ever.
        why = f"the API server refused this resource's status (HTTP {exc.status}): {_server_message(exc)[:500]}"
        generation = meta.get("generation")
        refused = C.condition(C.READY, False, C.STATUS_REFUSED, why, generation)
        patch["status"] = {"observedGeneration": generation, "conditions": C.merge(old.get("conditions"), [refused], rfc3339())}
        announced = [("Warning", C.STATUS_REFUSED, why)]
        log.warning("%s %s/%s: %s", body["kind"], meta.get("namespace", ""), meta["name"], why)
        written = await ctx.kube.apply(patch, subresource="status")
    ctx.cache.wrote(written)
    WRITES.labels(body["kind"], "status").inc()
    for kind, reason, message in announced:
        ctx.event(body, kind, reason, message)


