"""runtime/relist.py: after kopf re-lists (a watch that came back 410 Gone), what the indexes hold and the lists
lack is handled as deleted, and only that."""

from __future__ import annotations

import asyncio
from typing import Any

from pooling_operator.runtime.relist import Relists


def _obj(kind: str, name: str, uid: str, rv: int, namespace: str = "ns") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace, "uid": uid, "resourceVersion": str(rv)}}


class ListingKube:
    """Answers a list with the objects it holds, at resourceVersion 100."""

    def __init__(self, items: dict[str, list[dict[str, Any]]]) -> None:
        self.items = items
        self.requests: list[tuple[str, str, Any]] = []

    async def request(self, method: str, path: str, query: Any = None, **_: Any) -> dict[str, Any]:
        self.requests.append((method, path, query))
        plural = path.rsplit("/", 1)[-1]
        return {"metadata": {"resourceVersion": "100"}, "items": self.items.get(plural, [])}


def test_a_sweep_treats_only_older_unlisted_objects_as_deleted() -> None:
    kept, gone, newer = _obj("Deployment", "a", "u1", 50), _obj("Deployment", "b", "u2", 60), _obj("Deployment", "c", "u3", 150)
    kube = ListingKube({"deployments": [kept]})
    vanished: list[tuple[str, str]] = []
    relists = Relists(kube, [], lambda kind: [kept, gone, newer] if kind == "Deployment" else [],  # type: ignore[arg-type]
                      lambda kind, body: vanished.append((kind, body["metadata"]["name"])))
    assert asyncio.run(relists.sweep("Deployment")) == 1
    assert vanished == [("Deployment", "b")]  # c came by the watch after the list: kept
    (method, path, query), = kube.requests
    assert (method, path) == ("GET", "/apis/apps/v1/deployments") and "app.kubernetes.io/managed-by" in query[0][1]


def test_listed_events_before_the_first_pass_start_nothing_and_a_burst_starts_one_sweep() -> None:
    kube = ListingKube({})
    relists = Relists(kube, ["x", "y"], lambda kind: [], lambda kind, body: None, quiet=0.01)  # type: ignore[arg-type]
    spawned: list[Any] = []
    relists.listed("Deployment", spawned.append)
    assert spawned == []  # the initial listing
    relists.armed = True
    for kind in ("Deployment", "Pod", "PoolingService", "Namespace"):
        relists.listed(kind, spawned.append)
    assert len(spawned) == 1  # one sweep of every kind for the whole burst

    async def run() -> None:
        await spawned[0]

    asyncio.run(run())
    namespaced = [p for _, p, _ in kube.requests if "/namespaces/" in p]
    assert {p.split("/namespaces/")[1].split("/")[0] for p in namespaced} == {"x", "y"}  # per watched namespace
    assert not any(p.endswith("/namespaces") for _, p, _ in kube.requests)  # namespaces are not swept
