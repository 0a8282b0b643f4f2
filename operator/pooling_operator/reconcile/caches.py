"""ModelCache: its part of the flow (reconcile/flow.py). Children: the claim it asks for by size and the fill
Job (builders/caches.py); status from the Job and its pods' termination messages (status/caches.py). The
services that use a cache are queued again when it changes (runtime/core.py, on_owner)."""

from __future__ import annotations

from typing import Any

from pooling_operator.api import ModelCache
from pooling_operator.api.resources import VllmResource
from pooling_operator.builders import CacheMount
from pooling_operator.builders.caches import fill_job_name
from pooling_operator.k8s.cache import owner_key
from pooling_operator.reconcile.built import built
from pooling_operator.reconcile.context import Context
from pooling_operator.reconcile.flow import Children, Desired
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.reconcile.state import Built, Memory
from pooling_operator.status import conditions as C
from pooling_operator.status.caches import cache_ready, cache_status, cache_wait_message
from pooling_operator.vllm.storage_rules import cache_source_problems
from pooling_operator.vllm.validate import parse
from pooling_operator.vllm.workload import workload

CHILDREN = ("PersistentVolumeClaim", "Job")
NO_POLICIES = PolicySet()


class Caches:
    children = CHILDREN

    async def desired(self, ctx: Context, memory: Memory, policies: PolicySet, body: dict[str, Any]) -> Desired:
        b = built(memory, ctx.settings, ctx.operator_image, body, NO_POLICIES, None)
        return Desired(b, b.problems if b.problems or b.resource is None else [])

    async def refused(self, ctx: Context, body: dict[str, Any]) -> None:
        return None

    async def status(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, current: Children,
                     old_status: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        resource = desired.built.resource
        assert isinstance(resource, ModelCache)
        job = current.get(("Job", fill_job_name(resource)))
        return cache_status(resource, job, ctx.cache.pods_of(owner_key(body)), old_status), True

    async def after(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, status: dict[str, Any],
                    old_status: dict[str, Any]) -> None:
        return None


CACHES = Caches()


def mounted_cache(ctx: Context, body: dict[str, Any]) -> tuple[dict[str, Any] | None, CacheMount | None]:
    """The ModelCache a service or job names in model.source.cache (its body from the cache, None when it is
    not there) and what its pods mount once it is Ready; (None, None) for another source."""
    source = ((body.get("spec") or {}).get("model") or {}).get("source")
    ref = source.get("cache") if isinstance(source, dict) else None
    if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
        return None, None
    cache = ctx.cache.owner(("ModelCache", body["metadata"].get("namespace") or "", ref["name"]))
    ready = cache_ready(cache)
    return cache, CacheMount(*ready) if ready else None


def cache_desired(b: Built, cache: dict[str, Any] | None, mount: CacheMount | None) -> Desired | None:
    """What a service or job using a ModelCache wants before anything else: refused (naming the field) when
    the cache holds another model or revision, waiting while it is missing or not Ready; None to go on."""
    resource = b.resource
    if not isinstance(resource, VllmResource) or b.plan is None:
        return None
    source = resource.spec.model.source
    if source is None or source.cache is None:
        return None
    parsed = parse(cache).resource if cache is not None else None
    # The spec as written (the plan's workload view carries the cache's commit as its revision already).
    problems = list(cache_source_problems(workload(resource), parsed if isinstance(parsed, ModelCache) else None))
    if problems:
        return Desired(b, problems, C.INVALID_SPEC)
    if mount is None:
        return Desired(b, waiting=cache_wait_message(source.cache.name, cache))
    return None
