"""Pure builders: a validated resource -> the complete desired child objects (names, labels, owner refs).

`plan` is the one path from a valid resource to what it becomes, used alike by the reconcile and `render`: it
carries what the build resolved (the contract, the workload view, the vLLM command line) so nothing downstream
resolves them again or reads them back out of the objects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pooling_operator.api.resources import KINDS, VllmResource
from pooling_operator.builders.common import BuildContext, CacheMount, served
from pooling_operator.builders.jobs import build_job
from pooling_operator.builders.pooling_jobs import build_pooling_job
from pooling_operator.builders.services import build_service
from pooling_operator.vllm.args import DEFAULT_PORT, vllm_command
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.workload import Workload, workload

__all__ = ["BuildContext", "CacheMount", "Plan", "build", "plan"]

# Each workload kind's children; tests/test_kinds_table.py holds it to the kinds table (every service and job kind).
BUILDERS: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "PoolingService": build_service,
    "ScoringService": build_service,
    "HiddenStateJob": build_job,
    "PoolingJob": build_pooling_job,
}


@dataclass(frozen=True)
class Plan:
    """What one valid resource becomes under one contract."""

    resource: VllmResource
    contract: Contract
    workload: Workload
    argv: list[str] = field(default_factory=list)  # the vLLM container's command line (command + args)
    objects: list[dict[str, Any]] = field(default_factory=list)  # every child, in apply order


def plan(resource: VllmResource, c: Contract, ctx: BuildContext, w: Workload | None = None) -> Plan:
    """The resource's workload view (`w` when the caller has it), its vLLM command line and every child."""
    w = served(w or workload(resource), ctx.model_cache)
    # A service's vLLM listens where its Service sends; a job's sidecar on the port its driver calls.
    port = resource.spec.service.port if KINDS[resource.kind].family == "service" else DEFAULT_PORT  # type: ignore[union-attr]
    argv = vllm_command(resource, c, port=port, w=w)
    return Plan(resource, c, w, argv, BUILDERS[resource.kind](resource, c, ctx, w, argv))


def build(resource: VllmResource, c: Contract, ctx: BuildContext) -> list[dict[str, Any]]:
    """Every child the resource should have, in apply order."""
    return plan(resource, c, ctx).objects
