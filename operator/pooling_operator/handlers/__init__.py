"""The thin kopf layer: watches feed the cache's indexes and hand events to the runtime; no logic here.

Importing this module registers the handlers with kopf's default registry. Every kind in `api/kinds.py` that
the operator owns, creates or watches gets one kopf index (what the cache reads) and one event handler (what
enqueues its owner). kopf holds every handler until every index has its initial listing, so the first
reconcile sees a full cache. Every handler is an event handler (no finalizers, no kopf annotations on
objects: kopf's change handlers and timers would add them), so deleting a resource works while the operator
is down.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from pooling_operator.api.identity import MANAGED_LABELS
from pooling_operator.api.kinds import KINDS
from pooling_operator.k8s.cache import Cache, index_key, project, queue_stored
from pooling_operator.runtime import Runtime

log = logging.getLogger(__name__)

PREFIX = "operator.vllm-pooling.io"
FINALIZER = f"{PREFIX}/finalizer"
# Kinds whose CRD is absent (prometheus-operator, KEDA) are simply not served: kopf skips them.
# Kueue's Workloads and LocalQueues (role queue) are watched in every namespace, unlabelled (Kueue makes them).
WATCHED = tuple(k for k in KINDS.values() if k.role in ("owner", "child", "pod", "policy", "namespace", "queue"))


def _index_id(kind: str) -> str:
    return f"index_{kind.lower()}"


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kwargs: Any) -> None:
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
    if memo.get("webhook"):  # served only; the cluster registers it (the Helm chart)
        settings.admission.server = kopf.WebhookServer(**memo.webhook)
        settings.admission.managed = None
    runtime: Runtime = memo.runtime
    # kopf passes every index to startup handlers, by id: the cache reads them from now on.
    cache: Cache = runtime.ctx.cache
    cache.owners = kwargs[_index_id("owner")]
    cache.policy_index = kwargs[_index_id("AutoscalingPolicy")]
    cache.children = {k.kind: kwargs[_index_id(k.kind)] for k in WATCHED if k.role in ("child", "pod")}
    cache.namespaces = kwargs[_index_id("Namespace")]
    cache.workloads = kwargs[_index_id("Workload")]
    cache.local_queues = kwargs[_index_id("LocalQueue")]
    indexes = [kwargs[_index_id(k.kind)] for k in WATCHED if k.role != "owner"] + [cache.owners]
    runtime.drop_indexed = lambda body: _drop_indexed(indexes, body)
    await runtime.start()


def _drop_indexed(indexes: list[Any], body: dict[str, Any]) -> None:
    """Drop an object kopf never reported deleted (it was deleted while a watch was away and the re-list lacks
    it: runtime/relist.py) from every index. kopf offers no public call for this; `Index._discard` with kopf's
    own key (namespace, name, uid) is what kopf itself does on a DELETED event."""
    meta = body["metadata"]
    key = (meta.get("namespace"), meta.get("name"), meta.get("uid"))
    for index in indexes:
        discard = getattr(index, "_discard", None)
        if discard is not None:
            discard(key)


@kopf.on.cleanup()
async def stop(memo: kopf.Memo, **_: Any) -> None:
    await memo.runtime.stop()


def _plain(body: kopf.Body) -> dict[str, Any]:
    return {key: body[key] for key in body}  # a plain dict over kopf's raw one (values are the raw ones)


def _stored(body: kopf.Body, **_: Any) -> dict[Any, dict[str, Any]]:
    """An index function: the projected body under its owner's key (its own for an owner)."""
    plain = _plain(body)
    key = index_key(plain)
    return {} if key is None else {key: project(plain)}


def _policy_stored(name: str, body: kopf.Body, **_: Any) -> dict[str, dict[str, Any]]:
    return {name: project(_plain(body))}


def _namespace_stored(name: str, labels: kopf.Labels, **_: Any) -> dict[str, dict[str, str]]:
    return {name: dict(labels)}


async def _namespace_event(name: str, labels: kopf.Labels, memo: kopf.Memo, type: str | None, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    runtime.cache_synced()
    runtime.on_namespace(name, dict(labels), type == "DELETED")


async def _owner_event(body: kopf.Body, memo: kopf.Memo, type: str | None, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    runtime.cache_synced()
    if type is None:
        runtime.on_listed(str(body.get("kind")))
    runtime.on_owner(_plain(body), type == "DELETED")


async def _child_event(body: kopf.Body, memo: kopf.Memo, type: str | None, **_: Any) -> None:
    runtime: Runtime = memo.runtime
    runtime.cache_synced()
    if type is None:
        runtime.on_listed(str(body.get("kind")))
    runtime.on_child(_plain(body), type == "DELETED")


async def _policy_event(body: kopf.Body, memo: kopf.Memo, type: str | None, **_: Any) -> None:
    """A policy appeared, changed or went away: its services pick up the change now, and every policy's
    status counts the services that follow it."""
    runtime: Runtime = memo.runtime
    runtime.cache_synced()
    if type is None:
        runtime.on_listed("AutoscalingPolicy")
    runtime.ctx.cache.observed(_plain(body), deleted=type == "DELETED")
    runtime.on_policy(listed=type is None)


def _queue_stored(body: kopf.Body, **_: Any) -> dict[Any, dict[str, Any]]:
    found = queue_stored(_plain(body))
    return {} if found is None else {found[0]: found[1]}


async def _queue_event(body: kopf.Body, memo: kopf.Memo, type: str | None, **_: Any) -> None:
    """A Kueue Workload or LocalQueue changed: the queued jobs it concerns are reconciled (their Queued)."""
    runtime: Runtime = memo.runtime
    runtime.cache_synced()
    runtime.on_queue(_plain(body))


for _kind in WATCHED:
    _args = (_kind.group, _kind.version, _kind.plural)
    if _kind.role == "owner":
        # All three owner kinds share one index (keyed by kind, namespace, name).
        kopf.index(*_args, id=_index_id("owner"))(_stored)
        kopf.on.event(*_args, id=f"event_{_kind.kind.lower()}")(_owner_event)
    elif _kind.role == "namespace":
        kopf.index(*_args, id=_index_id(_kind.kind))(_namespace_stored)
        kopf.on.event(*_args, id="event_namespace")(_namespace_event)
    elif _kind.role == "queue":
        kopf.index(*_args, id=_index_id(_kind.kind))(_queue_stored)
        kopf.on.event(*_args, id=f"event_{_kind.kind.lower()}")(_queue_event)
    elif _kind.role == "policy":
        kopf.index(*_args, id=_index_id(_kind.kind))(_policy_stored)
        kopf.on.event(*_args, id="event_policy")(_policy_event)
    else:
        kopf.index(*_args, id=_index_id(_kind.kind), labels=MANAGED_LABELS)(_stored)
        kopf.on.event(*_args, id=f"event_{_kind.kind.lower()}", labels=MANAGED_LABELS)(_child_event)
