"""What the operator knows of the cluster without asking: watch-fed stores, plus its own recent writes.

The informers (one per kind in `api/kinds.py`, `runtime/watches.py`) fill stores keyed by the owning resource;
nothing is reconciled until every kind has been listed once, so a reconcile never mistakes a cold cache for
missing children. This module is pure: the stores arrive as plain mappings of key -> stored values, and the
watches decide which body goes under which key with `index_key`, `owner_key`, `owning_key` and `project`.

A watch event follows a write by a few milliseconds, and a reconcile may run in between. So every write the
operator makes is remembered (`wrote`, `deleted`) until the watch has caught up with it: reads return the
newer of the watched and the written copy, by resourceVersion, and a deleted child stays deleted. Without
this, a reconcile running between a create and its watch event would create the child again and announce it
twice.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pooling_operator.api.identity import COMPONENT_KINDS
from pooling_operator.api.kinds import (
    CACHE_KINDS,
    CHILD_KINDS,
    FRONT_KINDS,
    OWNER_KINDS,
    QUEUED_KINDS,
    SPACE_KINDS,
)

OwnerKey = tuple[str, str, str]  # (kind, namespace, name) of a PoolingService, ScoringService, HiddenStateJob, PoolingJob or ModelCache
Index = Mapping[Any, Collection[dict[str, Any]]]  # what a k8s/store.Store is, seen from here
REPLICAS_OWNER = "vllm-pooling.io/replicas-managers"  # our projection of managedFields: who set spec.replicas
WRITE_MEMORY_SECONDS = 120.0  # a write the watch never confirmed is forgotten after this


def owner_key(body: Mapping[str, Any]) -> OwnerKey:
    """(kind, namespace, name) of an object: an owner's key in the indexes, any object's in our writes."""
    meta = body["metadata"]
    return (str(body["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))


def owning_key(body: Mapping[str, Any]) -> OwnerKey | None:
    """The resource a child belongs to: its controller reference, or for a pod (whose controller is a ReplicaSet
    or a Job) the instance and component labels every child carries."""
    meta = body["metadata"]
    namespace = str(meta.get("namespace") or "")
    ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if ref is not None and ref.get("kind") in OWNER_KINDS:
        return (ref["kind"], namespace, ref["name"])
    labels = meta.get("labels") or {}
    kind = COMPONENT_KINDS.get(labels.get("app.kubernetes.io/component", ""))
    name = labels.get("app.kubernetes.io/instance")
    if kind and name:
        return (kind, namespace, name)
    return None


def _replica_managers(meta: Mapping[str, Any]) -> list[str]:
    return sorted({
        str(entry.get("manager"))
        for entry in meta.get("managedFields") or []
        if "f:replicas" in ((entry.get("fieldsV1") or {}).get("f:spec") or {})
    })


def compact(value: Any) -> Any:
    """A copy of a JSON value whose strings (keys and values) are interned: one str object per distinct text.

    json.loads makes every key and value its own object, and shares keys only within one answer; a watch event
    is one answer per object. Thousands of stored children repeat the same keys and most of the same values
    (labels, images, the vLLM arguments, condition types, timestamps and names within an object): after the
    creation of 3,000 services the copies were about half of what the stores held (bench/README.md, issue 48).
    Interned strings are freed with their last user (CPython's interned table does not keep them alive)."""
    kind = type(value)
    if kind is dict:  # leaves inline, not a call each: this runs on every object every watch event hands over
        return {_intern(k) if type(k) is str else k: _intern(v) if type(v) is str else compact(v) if type(v) in _NESTED else v
                for k, v in value.items()}
    if kind is list:
        return [_intern(v) if type(v) is str else compact(v) if type(v) in _NESTED else v for v in value]
    if kind is str:
        return _intern(value)
    return value


_intern = sys.intern
_NESTED = (dict, list)


def project(body: Mapping[str, Any]) -> dict[str, Any]:
    """The part of an object worth keeping, compacted (`compact`): everything but managedFields (the bulk of a
    stored object, read by nobody here except as "who set spec.replicas", kept as a list of managers), and of
    a pod only its identity and status (and the claims its spec names)."""
    return compact(_projected(body))


def _projected(body: Mapping[str, Any]) -> dict[str, Any]:
    meta = dict(body["metadata"])
    fields = meta.pop("managedFields", None)
    if fields and body.get("kind") == "Deployment":
        meta[REPLICAS_OWNER] = _replica_managers({"managedFields": fields})
    out: dict[str, Any] = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": meta}
    if body.get("kind") == "Pod":
        out["status"] = body.get("status") or {}
        spec = body.get("spec") or {}
        kept = {k: spec[k] for k in ("resourceClaims", "readinessGates") if spec.get(k)}
        if kept:  # the claims it was made with (kept while pods name them: reconcile/writes.py); its readiness gates
            out["spec"] = kept  # (the space gate checks a gated pod: runtime/space_gate.py)
        return out
    for key, value in body.items():
        if key not in out:
            out[key] = value
    return out


def raw_front_hosts(body: Mapping[str, Any]) -> list[str]:
    """The front hosts an owner's spec names as stored (lowercase), whatever the shape of what was written."""
    node: Any = body.get("spec")
    for key in ("autoscaling", "front", "kedaHttpAddOn", "hosts"):
        node = node.get(key) if isinstance(node, dict) else None
    return [h.lower() for h in node if isinstance(h, str)] if isinstance(node, list) else []


def replica_managers(obj: Mapping[str, Any]) -> list[str]:
    """Field managers that set the Deployment's spec.replicas, whether `obj` is projected or a full object."""
    meta = obj["metadata"]
    if REPLICAS_OWNER in meta:
        return list(meta[REPLICAS_OWNER])
    return _replica_managers(meta)


def _rv(obj: Mapping[str, Any]) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except (TypeError, ValueError):  # opaque elsewhere; etcd-backed servers give revisions
        return 0


def _uid(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("uid") or "")


@dataclass
class _Written:
    obj: dict[str, Any] | None  # None: deleted by us
    uid: str
    rv: int
    at: float
    parent: str  # the owner's uid for a child, "" for an owner


WrittenKey = OwnerKey  # (kind, namespace, name) of any object, as owner_key makes it


@dataclass
class Cache:
    """Owners, their children and pods, and the policies, from the informers' stores; plus our own writes."""

    owners: Index = field(default_factory=dict)  # OwnerKey -> [owner]
    children: Mapping[str, Index] = field(default_factory=dict)  # kind -> OwnerKey -> [child]
    policy_index: Index = field(default_factory=dict)  # name -> [AutoscalingPolicy]
    namespaces: Index | None = None  # name -> [labels]; None: namespaces are not watched
    workloads: Index = field(default_factory=dict)  # (namespace, Job name) -> [Kueue Workload], projected (queue_stored)
    local_queues: Index = field(default_factory=dict)  # (namespace, name) -> [Kueue LocalQueue], projected
    clock: Callable[[], float] = time.monotonic
    _written: dict[WrittenKey, _Written] = field(default_factory=dict)
    _by_parent: dict[str, set[WrittenKey]] = field(default_factory=dict)

    # ---- reads ----

    def namespace_labels(self, name: str) -> dict[str, str] | None:
        """A namespace's labels as watched; None when namespaces are not watched or it is not known."""
        if self.namespaces is None:
            return None
        return next(iter(self.namespaces.get(name) or ()), None)

    def policy_bodies(self) -> list[dict[str, Any]]:
        found = (self._fresher(owner_key(b), b) for store in self.policy_index.values() for b in store)
        return [b for b in found if b is not None]

    def owner(self, key: OwnerKey) -> dict[str, Any] | None:
        found = next(iter(self.owners.get(key) or ()), None)
        return self._fresher(key, found)

    def owner_keys(self) -> list[OwnerKey]:
        return list(self.owners.keys())

    def dependents(self, key: OwnerKey) -> list[OwnerKey]:
        """The owners whose state follows this one's: a cache's users (`using_cache`); none for other kinds."""
        return self.using_cache(key[1], key[2]) if key[0] in CACHE_KINDS else []

    def using_cache(self, namespace: str, name: str) -> list[OwnerKey]:
        """The services and jobs of `namespace` whose model.source.cache names the ModelCache `name`."""
        out = []
        for key in self.owner_keys():
            if key[1] != namespace or key[0] in CACHE_KINDS:
                continue
            source = (((self.owner(key) or {}).get("spec") or {}).get("model") or {}).get("source")
            if isinstance(source, dict) and isinstance(source.get("cache"), dict) and source["cache"].get("name") == name:
                out.append(key)
        return out

    def workload_of(self, job: Mapping[str, Any]) -> dict[str, Any] | None:
        """The Kueue Workload that stands for this Job (its controller reference names the Job's uid)."""
        meta = job["metadata"]
        found = self.workloads.get((str(meta.get("namespace") or ""), str(meta["name"]))) or ()
        return next((w for w in found if _controlled_by(w, str(meta.get("uid") or ""))), None)

    def local_queue(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next(iter(self.local_queues.get((namespace, name)) or ()), None)

    def queued_owners(self, namespace: str, *, job: str | None = None, local_queue: str | None = None) -> list[OwnerKey]:
        """The jobs of `namespace` with spec.queue that a Kueue object concerns: the one whose Job is named `job`
        (a Workload's owner), or those whose spec.queue.name is `local_queue`."""
        out = []
        for key in self.owner_keys():
            if key[0] not in QUEUED_KINDS or key[1] != namespace or (job is not None and key[2] != job):
                continue
            queue = ((self.owner(key) or {}).get("spec") or {}).get("queue")
            if isinstance(queue, dict) and (local_queue is None or queue.get("name") == local_queue):
                out.append(key)
        return out

    def children_of(self, key: OwnerKey, kinds: Iterable[str], uid: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The children of the owner with this uid, by (kind, name): controlled by it, as watched or as written."""
        wanted = set(kinds)
        watched: dict[tuple[str, str], dict[str, Any] | None] = {}
        for kind in wanted:
            for obj in (self.children.get(kind) or {}).get(key) or ():
                if _controlled_by(obj, uid):
                    watched[(kind, obj["metadata"]["name"])] = obj
        for kind, _, name in self._by_parent.get(uid) or ():
            if kind in wanted:
                watched.setdefault((kind, name), None)
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for (kind, name), seen in watched.items():
            fresher = self._fresher((kind, key[1], name), seen)
            if fresher is not None:
                found[(kind, name)] = fresher
        return found

    def pods_of(self, key: OwnerKey) -> list[dict[str, Any]]:
        return list((self.children.get("Pod") or {}).get(key) or ())

    def claiming_space(self, namespace: str, label: str) -> list[dict[str, Any]]:
        """The PoolingServices and PoolingJobs of `namespace` whose spec.embeddingSpace is `label`."""
        return [body for key in self.owner_keys() if key[1] == namespace and key[0] in SPACE_KINDS
                and (body := self.owner(key)) is not None and ((body.get("spec") or {}).get("embeddingSpace") == label)]  # fmt: skip

    def claiming_hosts(self, hosts: Collection[str]) -> list[dict[str, Any]]:
        """The services (of every namespace watched here) whose autoscaling.front.kedaHttpAddOn.hosts names one of
        `hosts` (lowercase): the add-on's interceptor routes a host to one route, cluster-wide."""
        wanted = set(hosts)
        return [body for key in self.owner_keys() if key[0] in FRONT_KINDS and (body := self.owner(key)) is not None
                and wanted.intersection(raw_front_hosts(body))]  # fmt: skip

    def in_namespace(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """Every watched object of a child kind in a namespace (the autoscaler's budget)."""
        return [o for key, store in (self.children.get(kind) or {}).items() if key[1] == namespace for o in store]

    # ---- our writes ----

    def wrote(self, obj: Mapping[str, Any], *, parent: str = "") -> None:
        """Remember an object as our write returned it (parent: the owner's uid for a child)."""
        self._remember(obj, project(obj), parent)

    def deleted(self, obj: Mapping[str, Any], *, parent: str = "") -> None:
        self._remember(obj, None, parent)

    def _remember(self, obj: Mapping[str, Any], stored: dict[str, Any] | None, parent: str) -> None:
        key = owner_key(obj)
        self._drop(key)
        self._written[key] = _Written(stored, _uid(obj), _rv(obj), self.clock(), parent)
        if parent:
            self._by_parent.setdefault(parent, set()).add(key)

    def _drop(self, key: WrittenKey) -> None:
        written = self._written.pop(key, None)
        if written is not None and written.parent:
            keys = self._by_parent.get(written.parent)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._by_parent[written.parent]

    def observed(self, body: Mapping[str, Any], *, deleted: bool = False) -> None:
        """A watch event: forget our write of this object once the watch shows it (or shows it gone)."""
        key = owner_key(body)
        written = self._written.get(key)
        if written is None or written.uid != _uid(body):
            return
        if deleted or (written.obj is not None and _rv(body) >= written.rv):
            self._drop(key)

    def forget(self, parent: str) -> None:
        """Drop what we remember of an owner and its children's writes (it is gone)."""
        for key in list(self._by_parent.get(parent) or ()):
            self._drop(key)
        for key in [k for k, w in self._written.items() if w.uid == parent]:
            self._drop(key)

    def remembered(self) -> int:
        return len(self._written)

    def _fresher(self, key: WrittenKey, watched: dict[str, Any] | None) -> dict[str, Any] | None:
        written = self._written.get(key)
        if written is None:
            return watched
        if self.clock() - written.at > WRITE_MEMORY_SECONDS:
            self._drop(key)
            return watched
        if written.obj is None:  # we deleted it: gone, unless the watch shows a new object of that name
            if watched is not None and _uid(watched) != written.uid:
                self._drop(key)
                return watched
            return None
        if watched is not None and _uid(watched) == written.uid and _rv(watched) >= written.rv:
            self._drop(key)  # the watch has caught up
            return watched
        return written.obj


def _controlled_by(obj: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("uid") == uid and ref.get("controller") for ref in obj["metadata"].get("ownerReferences") or [])


def queue_stored(body: Mapping[str, Any]) -> tuple[tuple[str, str], dict[str, Any]] | None:
    """A Kueue object as the cache keeps it: a Workload under (namespace, its Job's name) with its conditions and
    admission, a LocalQueue under (namespace, name) with its ClusterQueue; the rest (a Workload's pod sets are
    whole pod templates) is dropped. None for a Workload that no Job controls (another framework's)."""
    meta = body["metadata"]
    namespace = str(meta.get("namespace") or "")
    kept_meta = {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "ownerReferences") if k in meta}
    out: dict[str, Any] = {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"), "metadata": kept_meta}
    if body.get("kind") == "LocalQueue":
        out["spec"] = {"clusterQueue": (body.get("spec") or {}).get("clusterQueue")}
        return (namespace, str(meta["name"])), out
    job = workload_job(body)
    if job is None:
        return None
    status = body.get("status") or {}
    out["status"] = {k: status[k] for k in ("conditions", "admission") if k in status}
    return (namespace, job), out


def workload_job(body: Mapping[str, Any]) -> str | None:
    """The name of the Job a Kueue Workload stands for (its controller reference), or None (another framework's)."""
    ref = next((r for r in body["metadata"].get("ownerReferences") or [] if r.get("controller") and r.get("kind") == "Job"), None)
    return None if ref is None else str(ref["name"])


def index_key(body: Mapping[str, Any]) -> OwnerKey | None:
    """The key a watched object is stored under: its own for an owner, its owner's for a child or pod."""
    kind = body.get("kind")
    if kind in OWNER_KINDS:
        return owner_key(body)
    if kind in CHILD_KINDS or kind == "Pod":
        return owning_key(body)
    return None
