"""Pure builders: a validated resource -> the complete desired child objects (names, labels, owner refs).

`plan` is the one path from a valid resource to what it becomes, used alike by the reconcile and `render`: it
carries what the build resolved (the contract, the workload view, the vLLM command line) so nothing downstream
resolves them again or reads them back out of the objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pooling_operator.api import HiddenStateJob, PoolingJob, PoolingService, ScoringService
from pooling_operator.builders.common import BuildContext, CacheMount, served
from pooling_operator.builders.jobs import build_job
from pooling_operator.builders.pooling_jobs import build_pooling_job
from pooling_operator.builders.services import build_service
from pooling_operator.vllm.args import DEFAULT_PORT, vllm_command
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.workload import Workload, workload

__all__ = ["BuildContext", "CacheMount", "Plan", "build", "plan"]

Buildable = PoolingService | ScoringService | HiddenStateJob | PoolingJob


@dataclass(frozen=True)
class Plan:
    """What one valid resource becomes under one contract."""

    resource: Buildable
    contract: Contract
    workload: Workload
    argv: list[str] = field(default_factory=list)  # the vLLM container's command line (command + args)
    objects: list[dict[str, Any]] = field(default_factory=list)  # every child, in apply order


def plan(resource: Buildable, c: Contract, ctx: BuildContext, w: Workload | None = None) -> Plan:
    """The resource's workload view (`w` when the caller has it), its vLLM command line and every child."""
    w = served(w or workload(resource), ctx.model_cache)
    if isinstance(resource, HiddenStateJob):
        argv = vllm_command(resource, c, port=DEFAULT_PORT, w=w)
        return Plan(resource, c, w, argv, build_job(resource, c, ctx, w, argv))
    if isinstance(resource, PoolingJob):
        argv = vllm_command(resource, c, port=DEFAULT_PORT, w=w)
        return Plan(resource, c, w, argv, build_pooling_job(resource, c, ctx, w, argv))
    argv = vllm_command(resource, c, port=resource.spec.service.port, w=w)
    return Plan(resource, c, w, argv, build_service(resource, c, ctx, w, argv))


def build(resource: Buildable, c: Contract, ctx: BuildContext) -> list[dict[str, Any]]:
    """Every child the resource should have, in apply order."""
    return plan(resource, c, ctx).objects
