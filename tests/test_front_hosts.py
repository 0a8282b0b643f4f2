"""One front host, one service (issue 65): the KEDA HTTP add-on's interceptor routes a host to one route, so a second
claimant of a host would silently take or split the first one's traffic. Who holds a host (api/front_hosts.py), how
`validate` flags two claimants in one input, and how the reconcile leaves the later claimant's route unwritten while
the first keeps its own (reconcile/fronts.py)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator.api.front_hosts import HOSTS_PATH, HostClaim, holder, withheld
from pooling_operator.cli import main
from pooling_operator.k8s.cache import owner_key, project
from pooling_operator.status import conditions as C
from tests.factories import pooling, scoring
from tests.test_reconcile import Recording, cond, world

HOST = "bge.search.example.com"


def fronted(name: str, *hosts: str, namespace: str = "search", kind: Any = pooling) -> dict[str, Any]:
    return kind({"autoscaling": {"minReplicas": 0, "maxReplicas": 2, "front": {"kedaHttpAddOn": {"hosts": list(hosts)}}}},
                name=name, namespace=namespace)


# ---- who holds a host ------------------------------------------------------------------------------------------

def claim(who: str, hosts: set[str], held: set[str] = frozenset(), created: str = "2026-01-01T00:00:00Z",  # type: ignore[assignment]
          route_created: str = "") -> HostClaim:
    return HostClaim(who, frozenset(hosts), frozenset(held), created, route_created)


@pytest.mark.parametrize(
    ("claims", "first"),
    [
        # a route that names the host wins over an older claimant without one: serving traffic is never taken away
        ([claim("old", {HOST}, created="2026-01-01T00:00:00Z"),
          claim("routed", {HOST}, {HOST}, "2026-03-01T00:00:00Z", "2026-03-01T00:00:01Z")], "routed"),
        # two routes naming it (written at one moment by claimants that could not see each other): the oldest route
        ([claim("b", {HOST}, {HOST}, route_created="2026-02-01T00:00:00Z"),
          claim("a", {HOST}, {HOST}, route_created="2026-02-02T00:00:00Z")], "b"),
        # the same second: namespace and name decide, the same answer everywhere
        ([claim("PoolingService x/b", {HOST}, {HOST}, route_created="2026-02-01T00:00:00Z"),
          claim("PoolingService x/a", {HOST}, {HOST}, route_created="2026-02-01T00:00:00Z")], "PoolingService x/a"),
        # nobody routes it yet: the oldest claimant
        ([claim("young", {HOST}, created="2026-05-01T00:00:00Z"), claim("old", {HOST}, created="2026-04-01T00:00:00Z")], "old"),
        # a route that names the host though its spec no longer does still holds it until it is rewritten
        ([claim("leaving", set(), {HOST}, route_created="2026-06-01T00:00:00Z"), claim("new", {HOST}, created="2026-01-01T00:00:00Z")],
         "leaving"),
    ],
    ids=["a-route-beats-an-older-claim", "oldest-route", "same-second-by-name", "oldest-claim", "route-being-left"],
)
def test_who_holds_a_host(claims: list[HostClaim], first: str) -> None:
    found = holder(HOST, claims)
    assert found is not None and found.who == first
    assert holder(HOST, list(reversed(claims))) == found  # whatever order the cache lists them in


def test_only_the_same_host_clashes_and_a_service_is_told_who_holds_which() -> None:
    mine = claim("PoolingService s/mine", {HOST, "*.search.example.com", "only-mine.example.com"}, created="2026-02-01T00:00:00Z")
    other = claim("PoolingService t/other", {HOST, "a.search.example.com"}, {HOST}, route_created="2026-01-01T00:00:00Z")
    assert set(withheld(mine, [other])) == {HOST}  # a wildcard and an exact name under it do not clash
    assert withheld(other, [mine]) == {}


# ---- validate ----------------------------------------------------------------------------------------------------

def test_validate_flags_a_host_claimed_twice_in_its_input_naming_both(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "fronts.yaml"
    path.write_text(yaml.safe_dump_all([fronted("bge", HOST), fronted("rerank", HOST, "rerank.example.com",
                                                                          namespace="other", kind=scoring),
                                        fronted("alone", "alone.example.com")]))
    assert main(["validate", str(path)]) == 1
    [line] = capsys.readouterr().out.splitlines()
    assert line.startswith(f"{path}: ScoringService/rerank: {HOSTS_PATH}: {HOST} (also PoolingService/search/bge): ")
    assert "routes a host to one route" in line


# ---- on the cluster ----------------------------------------------------------------------------------------------

class Routes(Recording):
    """The recording API with InterceptorRoutes in the cluster that the operator did not write (a list answers them)."""

    routes: list[dict[str, Any]] = []

    async def list(self, kind: Any, namespace: str | None, selector: dict[str, str], fields: Any = None) -> list[Any]:
        return copy.deepcopy(self.routes) if kind.kind == "InterceptorRoute" else []


def route(name: str, namespace: str, *hosts: str, owner: dict[str, Any] | None = None, created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"route-{name}", "resourceVersion": "5",
                            "creationTimestamp": created}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "vllm-pooling.io/v1alpha1", "kind": owner["kind"], "name": owner["metadata"]["name"],
                                    "uid": owner["metadata"]["uid"], "controller": True}]
    return {"apiVersion": "http.keda.sh/v1beta1", "kind": "InterceptorRoute", "metadata": meta,
            "spec": {"target": {"service": name, "port": 8000}, "rules": [{"hosts": list(hosts)}]}}


def reconcile(body: dict[str, Any], created: str, others: list[dict[str, Any]] = (), routes: list[dict[str, Any]] = (),  # type: ignore[assignment]
              mine: dict[str, Any] | None = None) -> tuple[dict[str, Any], Recording]:
    """(the status written, the client) after one reconcile of `body`, with `others` (services, each with its route
    where `routes` has one it controls) in the cache and `routes` in the cluster; `mine`: this service's own route."""
    Routes.routes = [*routes, *([mine] if mine else [])]
    reconciles, kube, body = world(body, api=Routes)
    body["metadata"]["creationTimestamp"] = created
    cache = reconciles.ctx.cache
    cache.owners[owner_key(body)] = [project(body)]
    children: dict[Any, list[dict[str, Any]]] = {}
    for other in others:
        cache.owners[owner_key(other)] = [project(other)]
    for r in [*routes, *([mine] if mine else [])]:
        ref = (r["metadata"].get("ownerReferences") or [{}])[0]
        if ref.get("uid") in {o["metadata"]["uid"] for o in [*others, body]}:
            children.setdefault((ref["kind"], r["metadata"]["namespace"], ref["name"]), []).append(project(r))
    cache.children = {"InterceptorRoute": children}

    async def main() -> None:
        await reconciles.reconcile(body)
        await reconciles.ctx.events.drain()

    asyncio.run(main())
    return kube.statuses[-1], kube


def service(name: str, uid: str, created: str, *hosts: str, namespace: str = "search") -> dict[str, Any]:
    body = fronted(name, *hosts, namespace=namespace)
    body["metadata"].update(uid=uid, creationTimestamp=created, generation=1, resourceVersion="3")
    return body


OLDER = service("bge", "u-old", "2026-01-01T00:00:00Z", HOST)


def applied_route(kube: Recording) -> dict[str, Any] | None:
    return next((o for o in kube.applied if o["kind"] == "InterceptorRoute"), None)


def test_a_new_service_claiming_a_host_an_older_service_routes_gets_no_route_and_says_who_holds_it() -> None:
    younger = fronted("bge-copy", HOST, "bge-copy.example.com", namespace="other")
    status, kube = reconcile(younger, "2026-02-01T00:00:00Z", [OLDER], [route("bge", "search", HOST, owner=OLDER)])
    assert applied_route(kube) is None  # not written
    assert any(o["kind"] == "Deployment" for o in kube.applied)  # the rest is: its pods serve on its own Service
    ready = cond(status, C.READY)
    assert (ready["status"], ready["reason"]) == ("False", C.FRONT_HOST_CLAIMED)
    assert f"{HOST} (PoolingService search/bge routes it)" in ready["message"]
    assert cond(status, C.SPEC_VALID)["status"] == "True"
    assert status["endpoint"] == "http://bge-copy.other.svc:8000"  # not the interceptor, which would not reach it
    assert [(t, r) for t, r, _ in kube.events if r == C.FRONT_HOST_CLAIMED] == [("Warning", C.FRONT_HOST_CLAIMED)]


def test_the_first_claimant_keeps_serving() -> None:
    younger = service("bge-copy", "u-new", "2026-02-01T00:00:00Z", HOST, namespace="other")
    status, kube = reconcile(copy.deepcopy(OLDER), "2026-01-01T00:00:00Z", [younger],
                             mine=route("bge", "search", HOST, owner=OLDER))
    written = applied_route(kube)
    assert written is not None and written["spec"]["rules"] == [{"hosts": [HOST]}]
    assert cond(status, C.READY)["reason"] != C.FRONT_HOST_CLAIMED and not kube.deleted


def test_two_services_created_together_agree_before_either_route_exists() -> None:
    younger = service("bge-copy", "u-new", "2026-02-01T00:00:00Z", HOST, namespace="other")
    _, kube = reconcile(copy.deepcopy(OLDER), "2026-01-01T00:00:00Z", [younger])
    assert applied_route(kube) is not None
    status, kube = reconcile(copy.deepcopy(younger), "2026-02-01T00:00:00Z", [OLDER])
    assert applied_route(kube) is None and cond(status, C.READY)["reason"] == C.FRONT_HOST_CLAIMED
    assert "PoolingService search/bge claimed it first" in cond(status, C.READY)["message"]


def test_a_route_written_by_someone_else_holds_its_host() -> None:
    status, kube = reconcile(fronted("bge", HOST), "2026-03-01T00:00:00Z", routes=[route("shop", "web", HOST)])
    assert applied_route(kube) is None
    assert f"{HOST} (InterceptorRoute web/shop routes it)" in cond(status, C.READY)["message"]


def test_of_two_routes_naming_a_host_the_younger_is_deleted() -> None:
    """Both claimants wrote a route (each reconciled before it saw the other): the younger route goes, so the
    interceptor is left with one route for the host."""
    me = service("bge-copy", "svc-1", "2026-01-01T00:00:00Z", HOST, namespace="other")
    status, kube = reconcile(fronted("bge-copy", HOST, namespace="other"), "2026-01-01T00:00:00Z", [OLDER],
                             [route("bge", "search", HOST, owner=OLDER, created="2026-01-01T00:00:02Z")],
                             mine=route("bge-copy", "other", HOST, owner=me, created="2026-01-01T00:00:03Z"))
    assert applied_route(kube) is None
    assert [(o["kind"], o["metadata"]["name"]) for o in kube.deleted] == [("InterceptorRoute", "bge-copy")]
    assert cond(status, C.READY)["reason"] == C.FRONT_HOST_CLAIMED


def test_a_service_whose_hosts_are_its_own_or_that_has_no_front_posts_no_warning() -> None:
    """(A restarted operator once posted 'InterceptorRoute ... not written: None' for every service.)"""
    for body in (pooling(name="plain", namespace="search"), copy.deepcopy(OLDER)):
        _, kube = reconcile(body, "2026-01-01T00:00:00Z")
        assert not [e for e in kube.events if e[1] == C.FRONT_HOST_CLAIMED], kube.events


def test_a_route_of_its_own_name_held_by_someone_else_is_a_taken_name_not_a_host_claim() -> None:
    """The route this service would write, already there without a controller: ChildNameTaken (writes.py) says so."""
    body = fronted("bge", HOST)
    status, _kube = reconcile(body, "2026-03-01T00:00:00Z", routes=[route("bge", "search", HOST)])
    assert cond(status, C.READY)["reason"] != C.FRONT_HOST_CLAIMED
