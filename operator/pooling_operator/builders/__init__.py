"""Pure builders: a validated resource -> the complete desired child objects (names, labels, owner refs)."""

from __future__ import annotations

from typing import Any

from pooling_operator.api import HiddenStateJob, PoolingService, ScoringService
from pooling_operator.builders.common import BuildContext
from pooling_operator.builders.jobs import build_job
from pooling_operator.builders.services import build_service
from pooling_operator.vllm.contract import Contract

__all__ = ["BuildContext", "build"]


def build(resource: PoolingService | ScoringService | HiddenStateJob, c: Contract, ctx: BuildContext) -> list[dict[str, Any]]:
    """Every child the resource should have, in apply order."""
    if isinstance(resource, HiddenStateJob):
        return build_job(resource, c, ctx)
    return build_service(resource, c, ctx)
