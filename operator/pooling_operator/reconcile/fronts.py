"""One front host, one service, as the cluster holds it (api/front_hosts.py decides who holds a host).

The claimants are the services this replica watches (their specs and their InterceptorRoutes, from the cache) and,
when this service names a host its own route does not hold yet, every InterceptorRoute of the cluster (one list:
routes written by hand or by another tool, and those of services another operator shard owns). A service whose
host is held elsewhere is not refused: its InterceptorRoute is left out of what it wants (and deleted if it was
written), Ready says who holds which host, and its pods serve on its own Service. The runtime reconciles the other
claimants of a host again when one of them changes or goes (runtime/core.py), so the next in line takes it.

Not seen: a host that two claimants invisible to each other write at the same moment (two operator shards, or a
tool beside the operator); each then holds a route naming it until one of them is changed.
"""

from __future__ import annotations

import logging
from typing import Any

from pooling_operator.api.front_hosts import HostClaim, front_hosts, withheld
from pooling_operator.api.resources import Service
from pooling_operator.k8s.api import KINDS, ApiError
from pooling_operator.k8s.cache import owner_key, raw_front_hosts
from pooling_operator.reconcile.context import Context

log = logging.getLogger(__name__)
ROUTE = "InterceptorRoute"


def route_hosts(route: dict[str, Any] | None) -> frozenset[str]:
    """The hosts an InterceptorRoute names (spec.rules[].hosts), lowercase."""
    rules = ((route or {}).get("spec") or {}).get("rules") or []
    return frozenset(str(h).lower() for r in rules if isinstance(r, dict) for h in r.get("hosts") or [])


def _claim(ctx: Context, body: dict[str, Any]) -> HostClaim:
    meta = body["metadata"]
    key = owner_key(body)
    route = ctx.cache.children_of(key, (ROUTE,), str(meta.get("uid") or "")).get((ROUTE, str(meta["name"])))
    return HostClaim(f"{key[0]} {key[1]}/{key[2]}", frozenset(raw_front_hosts(body)), route_hosts(route),
                     str(meta.get("creationTimestamp") or ""), str(((route or {}).get("metadata") or {}).get("creationTimestamp") or ""))


async def _routes_elsewhere(ctx: Context, known: set[str], mine: tuple[str, str]) -> list[HostClaim]:
    """Every InterceptorRoute of the cluster not controlled by `known` (this service and the claimants the cache
    has), as a claim: named after the service that controls it where one does, else after the route itself. [] where the add-on's CRD is not
    installed, or where this operator may not list routes cluster-wide (it then sees the services it watches)."""
    try:
        routes = await ctx.kube.list(KINDS[ROUTE], None, {})
    except ApiError as exc:
        if exc.status != 403:
            raise
        log.info("Listed no InterceptorRoutes outside the watched services: %s", exc)
        return []
    out = []
    for route in routes:
        meta = route.get("metadata") or {}
        ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        if ref is not None and str(ref.get("uid")) in known:
            continue
        if (str(meta.get("namespace")), str(meta.get("name"))) == mine:
            continue  # the name this service's route takes, held by someone else: ChildNameTaken says so (writes.py)
        who = f"{ref['kind']} {meta.get('namespace')}/{ref['name']}" if ref is not None else f"{ROUTE} {meta.get('namespace')}/{meta.get('name')}"
        created = str(meta.get("creationTimestamp") or "")
        hosts = route_hosts(route)
        out.append(HostClaim(who, hosts, hosts, created, created))
    return out


async def hosts_held_elsewhere(ctx: Context, body: dict[str, Any], resource: Service) -> dict[str, HostClaim]:
    """{host: who holds it} for each front host of this service that another claimant holds."""
    if not front_hosts(resource.spec):
        return {}
    mine = _claim(ctx, body)
    uid = str(body["metadata"].get("uid") or "")
    peers = [b for b in ctx.cache.claiming_hosts(mine.hosts) if str(b["metadata"].get("uid") or "") != uid]
    others = [_claim(ctx, b) for b in peers]
    if mine.hosts - mine.held:  # a host not routed here yet: does anything else in the cluster route it?
        known = {uid, *(str(b["metadata"].get("uid") or "") for b in peers)}
        others += await _routes_elsewhere(ctx, known, (str(body["metadata"].get("namespace") or ""), str(body["metadata"]["name"])))
    return withheld(mine, others)
