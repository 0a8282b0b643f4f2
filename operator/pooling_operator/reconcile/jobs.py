"""HiddenStateJob: its part of the flow (reconcile/flow.py). The spec is immutable and the Job's pod template
too, so an existing Job is never applied again (reconcile/writes.py); status comes from the Job, its pods and
the driver's progress ConfigMap."""

from __future__ import annotations

from typing import Any

from pooling_operator.api import HiddenStateJob
from pooling_operator.k8s.api import KINDS
from pooling_operator.k8s.cache import owner_key
from pooling_operator.reconcile.built import built
from pooling_operator.reconcile.caches import cache_desired, mounted_cache
from pooling_operator.reconcile.context import Context
from pooling_operator.reconcile.flow import Children, Desired
from pooling_operator.reconcile.policyset import PolicySet
from pooling_operator.reconcile.state import Memory
from pooling_operator.status.jobs import job_status

CHILDREN = ("ServiceAccount", "Role", "RoleBinding", "ConfigMap", "Job")
NO_POLICIES = PolicySet()  # jobs follow no AutoscalingPolicy


class Jobs:
    children = CHILDREN

    async def desired(self, ctx: Context, memory: Memory, policies: PolicySet, body: dict[str, Any]) -> Desired:
        cache, mount = mounted_cache(ctx, body)
        b = built(memory, ctx.settings, ctx.operator_image, body, NO_POLICIES, None, mount)
        if b.problems or b.resource is None:
            return Desired(b, b.problems)
        return cache_desired(b, cache, mount) or Desired(b)

    async def refused(self, ctx: Context, body: dict[str, Any]) -> None:
        return None

    async def status(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, current: Children,
                     old_status: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        meta = body["metadata"]
        resource = desired.built.resource
        assert isinstance(resource, HiddenStateJob)
        job = current.get(("Job", meta["name"]))
        configmap = current.get(("ConfigMap", f"{meta['name']}-progress"))
        pods = ctx.cache.pods_of(owner_key(body))
        refusals: list[dict[str, Any]] = []
        if job is not None and not pods and not (job.get("status") or {}).get("active"):
            # No pod at all: ask whether the Job controller was refused (quota, PodSecurity); one read, only then.
            fields = {"involvedObject.kind": "Job", "involvedObject.name": meta["name"], "reason": "FailedCreate"}
            refusals = [e for e in await ctx.kube.list(KINDS["Event"], meta.get("namespace"), {}, fields)
                        if (e.get("involvedObject") or {}).get("uid") == job["metadata"].get("uid")]
        return job_status(resource, job, configmap, pods, refusals), True

    async def after(self, ctx: Context, memory: Memory, body: dict[str, Any], desired: Desired, status: dict[str, Any],
                    old_status: dict[str, Any]) -> None:
        return None


JOBS = Jobs()
