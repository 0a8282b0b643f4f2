"""One front host, one service: who holds a host that several claim (`autoscaling.front.kedaHttpAddOn.hosts`).

The KEDA HTTP add-on's interceptor keeps one routing table for the whole cluster, keyed by host (and path): a host
that two InterceptorRoutes name goes to one of them, so one service's traffic would silently reach the other. A
host is matched exactly, case aside; `*.example.com` and `a.example.com` do not clash (the add-on prefers the
exact host).

Who holds a contested host, in this order (the same answer from every replica and every reconcile):
1. a route that already names it, the oldest route first (creationTimestamp, then namespace and name: the Gateway
   API's rule for conflicting routes), so a service that serves a host keeps it when another one claims it later;
2. then the claims not yet routed, the oldest claimant first (creationTimestamp, then namespace and name), so two
   services created together agree on which of them writes its route.

`validate` judges its input in order (`host_clashes`): the later of two resources naming a host is flagged, naming
the earlier. Pure: values in, values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import AnyResource, Service
from pooling_operator.api.services import ServingSpec

HOSTS_PATH = "spec.autoscaling.front.kedaHttpAddOn.hosts"


def front_hosts(spec: ServingSpec) -> tuple[str, ...]:
    """The front hosts a service's spec names (lowercased, as the interceptor matches them), in its order."""
    front = spec.autoscaling.front if spec.autoscaling is not None else None
    if front is None:
        return ()
    return tuple(dict.fromkeys(h.lower() for h in front.keda_http_add_on.hosts))


@dataclass(frozen=True)
class HostClaim:
    """One claimant of front hosts: a service of ours (by its spec, and its route as observed) or a route written by
    someone else (`who` names it, `created` is the route's)."""

    who: str  # how a message names it: "PoolingService search/bge" or "InterceptorRoute web/shop"
    hosts: frozenset[str]  # the hosts it claims
    held: frozenset[str]  # the hosts its InterceptorRoute names now (observed)
    created: str  # the claimant's creationTimestamp (RFC 3339 sorts as text)
    route_created: str = ""  # its route's creationTimestamp, "" without one

    def rank(self, host: str) -> tuple[int, str, str]:
        if host in self.held:
            return (0, self.route_created, self.who)
        return (1, self.created, self.who)


def holder(host: str, claims: Iterable[HostClaim]) -> HostClaim | None:
    """Who holds `host` among its claimants (module docstring)."""
    found = [c for c in claims if host in c.hosts or host in c.held]
    return min(found, key=lambda c: c.rank(host)) if found else None


def withheld(mine: HostClaim, others: Iterable[HostClaim]) -> dict[str, HostClaim]:
    """{host: who holds it} for each of `mine`'s hosts that another claimant holds."""
    others = [o for o in others if o.who != mine.who]
    out: dict[str, HostClaim] = {}
    for host in sorted(mine.hosts):
        first = holder(host, [mine, *others])
        if first is not None and first.who != mine.who:
            out[host] = first
    return out


def held_message(taken: dict[str, HostClaim]) -> str:
    """What a service whose hosts are held by others is told (its condition, and `validate`)."""
    parts = []
    for host, who in sorted(taken.items()):
        how = "routes it" if host in who.held else "claimed it first"
        parts.append(f"{host} ({who.who} {how})")
    hosts = ", ".join(parts)
    return (f"{hosts}: a front host belongs to one service, since the KEDA HTTP add-on's interceptor routes a host to one "
            "route; choose another host, or remove it from the other first. This service's InterceptorRoute is not "
            "written until then; its pods serve on its own Service")


def host_clashes(resources: Sequence[AnyResource | None]) -> dict[int, Problem]:
    """{index: problem} for each resource naming a front host that an earlier one of the input names (hosts are
    one table for the whole cluster, so the namespace does not matter)."""
    first: dict[str, str] = {}  # host -> Kind/namespace/name
    out: dict[int, Problem] = {}
    for i, r in enumerate(resources):
        if not isinstance(r, Service):
            continue  # only a service has a front
        hosts, meta = front_hosts(r.spec), r.metadata
        if not hosts:
            continue
        me = f"{r.kind}/{meta.namespace or 'default'}/{meta.name}"
        taken = {h: first[h] for h in hosts if h in first}
        if taken:
            named = ", ".join(f"{h} (also {who})" for h, who in sorted(taken.items()))
            out[i] = Problem(HOSTS_PATH, f"{named}: a front host belongs to one service, since the KEDA HTTP add-on's "
                             "interceptor routes a host to one route; choose another host for one of them")
        for h in hosts:
            first.setdefault(h, me)
    return out
