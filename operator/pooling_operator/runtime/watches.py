"""What feeds the cache: one informer (`k8s/informer.py`) per watched kind and scope, each object placed in
its kind's store (`k8s/store.py`) under the key the cache reads it by, and handed to the runtime.

Every kind in `api/kinds.py` that the operator owns, creates or watches is watched here: owners, their
children and pods (only what carries our managed-by label), the policies, namespaces (for their labels) and
Kueue's Workloads and LocalQueues. The runtime hears "the caches are synced" once every informer has listed
its kind once (a kind not served counts, empty), so a reconcile never mistakes a cold cache for missing
children. A kind whose CRD is absent (prometheus-operator, KEDA, Kueue) is watched once its CRD appears:
the CustomResourceDefinitions are then watched too, by name and metadata only.

Before this, kopf's indexes fed the cache. kopf holds every handler until every index is filled and keeps a
toggle per listed object in a set that each waiting object worker re-evaluates on every change, which made a
restart's first pass grow with the square of the objects (bench/README.md, "restart").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from typing import Any, Protocol

from pooling_operator.api.identity import MANAGED_LABELS
from pooling_operator.api.kinds import KINDS, Kind
from pooling_operator.k8s.api import METADATA_ONLY
from pooling_operator.k8s.cache import index_key, owner_key, project, queue_stored
from pooling_operator.k8s.informer import Event, Informer
from pooling_operator.k8s.store import Store
from pooling_operator.reconcile import Context
from pooling_operator.runtime.heap import Heap
from pooling_operator.runtime.shards import Sharding

log = logging.getLogger(__name__)

WATCHED = tuple(k for k in KINDS.values() if k.role in ("owner", "child", "pod", "policy", "namespace", "queue"))
CRD = Kind("apiextensions.k8s.io/v1", "CustomResourceDefinition", "customresourcedefinitions", namespaced=False)


def project_namespace(body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    kept = {k: meta[k] for k in ("name", "uid", "resourceVersion", "labels") if k in meta}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": kept}


def project_queue(body: dict[str, Any]) -> dict[str, Any]:
    found = queue_stored(body)
    if found is not None:
        return found[1]
    meta = body["metadata"]  # another framework's Workload: its identity only (for the re-list's comparison)
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}}  # fmt: skip


def project_identity(body: dict[str, Any]) -> dict[str, Any]:
    """Another shard's child, pod or queue object: what the informer's re-list compares, nothing more."""
    meta = body["metadata"]
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": kept}


def project_foreign(body: dict[str, Any]) -> dict[str, Any]:
    """Another shard's owner, as the policies' counts read it: its identity and spec.autoscaling."""
    meta, spec = body["metadata"], body.get("spec") or {}
    kept = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion") if k in meta}
    out = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": kept}
    if "autoscaling" in spec:
        out["spec"] = {"autoscaling": spec["autoscaling"]}
    return out


def project_crd(body: dict[str, Any]) -> dict[str, Any]:
    meta = body["metadata"]
    return {"metadata": {k: meta[k] for k in ("name", "uid", "resourceVersion") if k in meta}}


def _rules(policy: dict[str, Any]) -> tuple[Any, Any]:
    """What services follow of an AutoscalingPolicy: its spec, and whether it is going away."""
    return policy.get("spec"), policy["metadata"].get("deletionTimestamp")


class Receiver(Protocol):
    """What the watches hand events to: the runtime (runtime/core.py)."""

    ctx: Context

    def on_owner(self, body: dict[str, Any], deleted: bool) -> None: ...
    def on_foreign_owner(self, body: dict[str, Any], deleted: bool) -> None: ...
    def on_child(self, body: dict[str, Any], deleted: bool) -> None: ...
    def on_policy(self) -> None: ...
    def on_namespace(self, name: str, labels: dict[str, str], deleted: bool) -> None: ...
    def on_queue(self, body: dict[str, Any]) -> None: ...
    def cache_synced(self) -> None: ...


class Watches:
    """The informers of one operator replica and the stores they fill; `start` them once the runtime runs."""

    def __init__(self, runtime: Receiver, namespaces: list[str], sharding: Sharding | None = None) -> None:
        self.runtime = runtime
        self.sharding = sharding or Sharding()
        # another shard's owners, slimmed to what the policies' counts read (shard 0 only; runtime/shards.py)
        self.foreign = Store()
        self.kube = runtime.ctx.kube
        cache = runtime.ctx.cache
        self.owners, self.policies, self.namespaces = Store(), Store(), Store()
        self.workloads, self.local_queues = Store(), Store()
        self.children: dict[str, Store] = {k.kind: Store() for k in WATCHED if k.role in ("child", "pod")}
        cache.owners, cache.policy_index, cache.namespaces = self.owners, self.policies, self.namespaces
        cache.children, cache.workloads, cache.local_queues = self.children, self.workloads, self.local_queues
        self.informers: list[Informer] = []
        for kind in WATCHED:
            scopes: list[str | None] = list(namespaces) if namespaces and kind.namespaced else [None]
            for namespace in scopes:
                self.informers.append(Informer(
                    self.kube, kind, namespace, handle=self._handler(kind), listed=self._listed,
                    project=self._sharded(kind, self._projection(kind)),
                    selector=MANAGED_LABELS if kind.role in ("child", "pod") else None,
                ))  # fmt: skip
        self.crds: Informer | None = None  # watched once some kind is not served
        self.synced = False
        self.heap = Heap()  # the collector held while the first lists fill the stores (runtime/heap.py)
        self._tasks: list[asyncio.Task[Any]] = []

    # ---- lifetime ----

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.heap.hold()
        self._tasks = [loop.create_task(i.run(), name=f"watch {i.name}") for i in self.informers]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        self.heap.release()

    def objects(self) -> dict[str, int]:
        """Objects held per store (the bench and the churn test read it)."""
        out = {"owners": self.owners.objects(), "foreign owners": self.foreign.objects(), "policies": self.policies.objects(), "namespaces": self.namespaces.objects(),
               "workloads": self.workloads.objects(), "localqueues": self.local_queues.objects()}  # fmt: skip
        out.update({kind: store.objects() for kind, store in self.children.items()})
        return out

    # ---- what each kind's events do ----

    @staticmethod
    def _projection(kind: Kind) -> Callable[[dict[str, Any]], dict[str, Any]]:
        return {"namespace": project_namespace, "queue": project_queue}.get(kind.role, project)

    def _sharded(self, kind: Kind, project: Callable[[dict[str, Any]], dict[str, Any]]) -> Callable[[dict[str, Any]], dict[str, Any]]:
        """A shard's projection: another shard's objects slimmed before the informer keeps them (it remembers
        what it last saw of every object, for its re-lists), so a shard holds the others' identities only."""
        if not (kind.namespaced and self.sharding.sharded):
            return project
        owns, slim = self.sharding.owns, project_foreign if kind.role == "owner" else project_identity

        def choose(body: dict[str, Any]) -> dict[str, Any]:
            return project(body) if owns(body["metadata"].get("namespace")) else slim(body)

        return choose

    def _handler(self, kind: Kind) -> Callable[[Event], None]:
        runtime = self.runtime
        role = kind.role

        def placed(store: Store, key: Hashable | None, value: dict[str, Any], event: Event) -> None:
            uid = str(event.body["metadata"].get("uid") or "")
            if event.type == "DELETED":
                store.remove(uid)
            else:
                store.put(uid, key, value)

        sharding = self.sharding
        namespaced = kind.namespaced

        def handle(event: Event) -> None:
            body, deleted = event.body, event.type == "DELETED"
            if namespaced and not sharding.owns(body["metadata"].get("namespace")):
                if role == "owner" and sharding.writes_policy_status:
                    placed(self.foreign, owner_key(body), project_foreign(body), event)
                    runtime.on_foreign_owner(body, deleted)
                return  # another shard's: not cached, not reconciled
            if role == "owner":
                placed(self.owners, owner_key(body), body, event)
                runtime.on_owner(body, deleted)
            elif role in ("child", "pod"):
                placed(self.children[kind.kind], index_key(body), body, event)
                runtime.on_child(body, deleted)
            elif role == "policy":
                name = str(body["metadata"]["name"])
                before = next(iter(self.policies.get(name) or ()), None)
                placed(self.policies, name, body, event)
                runtime.ctx.cache.observed(body, deleted=deleted)
                if deleted or before is None or _rules(before) != _rules(body):
                    # not on a change of its status alone: shard 0 writes the policies' counts while services
                    # come and go, and each write reconciled every resource of every shard again
                    runtime.on_policy()
            elif role == "namespace":
                labels = dict(body["metadata"].get("labels") or {})
                placed(self.namespaces, str(body["metadata"]["name"]), labels, event)
                runtime.on_namespace(str(body["metadata"]["name"]), labels, deleted)
            elif role == "queue":
                found = queue_stored(body)
                placed(self.local_queues if kind.kind == "LocalQueue" else self.workloads, found and found[0], body, event)
                runtime.on_queue(body)

        return handle

    def _listed(self, informer: Informer) -> None:
        """An informer finished a list. Once every one has, the runtime's caches are synced; a kind not served
        starts the watch of CRDs, which tells its informer when it is."""
        if informer.served is False and self.crds is None and informer is not self.crds:
            self.crds = Informer(self.kube, CRD, None, handle=self._crd_event, listed=lambda _: None,
                                 project=project_crd, accept=METADATA_ONLY)  # fmt: skip
            self._tasks.append(asyncio.get_running_loop().create_task(self.crds.run(), name="watch CustomResourceDefinitions"))
        if not self.synced and all(i.lists for i in self.informers):
            self.synced = True
            log.info("Caches filled: %s", ", ".join(f"{n} {k}" for k, n in self.objects().items() if n))
            self.heap.settle()
            self.runtime.cache_synced()

    def _crd_event(self, event: Event) -> None:
        if event.type == "DELETED":
            return  # the kind's own watch ends and its re-list finds it not served
        name = str(event.body["metadata"].get("name") or "")
        for informer in self.informers:
            if informer.served is False and name == f"{informer.kind.plural}.{informer.kind.group}":
                informer.serve()
