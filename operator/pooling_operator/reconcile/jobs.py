"""The job kinds, HiddenStateJob and PoolingJob: their part of the flow (reconcile/flow.py). The spec is immutable and the Job's pod template
too, so an existing Job is never applied again (reconcile/writes.py): with spec.queue that is also what leaves
`suspend`, `parallelism` and the scheduling directives to Kueue. Status comes from the Job, its pods, the
driver's progress ConfigMap and, for a queued job, Kueue's Workload and LocalQueue (status/queue.py)."""

from __future__ import annotations

from typing import Any

from pooling_operator.api import PoolingJob
from pooling_operator.api.resources import Job
from pooling_operator.builders import names
from pooling_operator.k8s.api import KINDS
from pooling_operator.k8s.cache import owner_key
from pooling_operator.reconcile.built import built
from pooling_operator.reconcile.caches import cache_desired, mounted_cache
from pooling_operator.reconcile.context import Context
from pooling_operator.reconcile.flow import Children, Desired
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.reconcile.spaces import space_problems
from pooling_operator.reconcile.state import Memory
from pooling_operator.status import conditions as C
from pooling_operator.status.jobs import job_status
from pooling_operator.status.pooling_jobs import pooling_job_status
from pooling_operator.status.queue import QueueObserved, suspended

CHILDREN = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job")
NO_POLICIES = PolicySet()  # jobs follow no AutoscalingPolicy


async def queue_observed(ctx: Context, resource: Job, job: dict[str, Any] | None) -> QueueObserved:
    """Kueue's side of a queued job, from the watch-fed cache. One read, only while the Job is suspended and
    Kueue has made no Workload for it and no LocalQueue of that name is watched: does the LocalQueue exist,
    and is Kueue installed at all (a 404 that names no object)?"""
    assert resource.spec.queue is not None
    namespace, name = resource.metadata.namespace or "", resource.spec.queue.name
    workload = ctx.cache.workload_of(job) if job is not None else None
    local_queue = ctx.cache.local_queue(namespace, name)
    if job is None or workload is not None or local_queue is not None or not suspended(job):
        return QueueObserved(workload, local_queue)
    local_queue, installed = await ctx.kube.lookup(KINDS["LocalQueue"], namespace, name)
    return QueueObserved(None, local_queue, installed)


class Jobs:
    children = CHILDREN

    async def desired(self, ctx: Context, memory: Memory, policies: PolicySet, body: dict[str, Any]) -> Desired:
        cache, mount = mounted_cache(ctx, body)
        b = built(memory, ctx.settings, ctx.operator_image, body, NO_POLICIES, None, mount)
        if b.problems or b.resource is None:
            return Desired(b, b.problems)
        if claimed := space_problems(ctx, body):
            return Desired(b, claimed, C.EMBEDDING_SPACE_CLAIMED)
        return cache_desired(b, cache, mount) or Desired(b)

    async def refused(self, ctx: Context, body: dict[str, Any]) -> None:
        return None

    async def status(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, current: Children,
                     old_status: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        meta = body["metadata"]
        resource = desired.built.resource
        assert isinstance(resource, Job)
        job = current.get(("Job", meta["name"]))
        configmap = current.get(("ConfigMap", names.progress_configmap(meta["name"])))
        pods = ctx.cache.pods_of(owner_key(body))
        refusals: list[dict[str, Any]] = []
        if job is not None and not pods and not (job.get("status") or {}).get("active"):
            # No pod at all: ask whether the Job controller was refused (quota, PodSecurity); one read, only then.
            fields = {"involvedObject.kind": "Job", "involvedObject.name": meta["name"], "reason": "FailedCreate"}
            refusals = [e for e in await ctx.kube.list(KINDS["Event"], meta.get("namespace"), {}, fields)
                        if (e.get("involvedObject") or {}).get("uid") == job["metadata"].get("uid")]
        queue = await queue_observed(ctx, resource, job) if resource.spec.queue is not None else None
        if isinstance(resource, PoolingJob):
            plan = desired.built.plan
            assert plan is not None  # a valid job always has one (no policy can refuse it)
            return pooling_job_status(resource, job, configmap, pods, refusals, queue, w=plan.workload), True
        return job_status(resource, job, configmap, pods, refusals, queue), True

    async def after(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, status: dict[str, Any],
                    old_status: dict[str, Any]) -> None:
        return None


JOBS = Jobs()
