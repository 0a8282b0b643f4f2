"""What a resource asks of vLLM, independent of its kind: runner, task, convert, pooling and extras."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from pooling_operator.api import HiddenStateJob, PoolingJob, PoolingService, ScoringService
from pooling_operator.api.base import EngineSpec, ModelSpec
from pooling_operator.api.resources import FAMILY_KINDS, VllmResource
from pooling_operator.api.services import GenerativeSpec, PoolingSpec
from pooling_operator.api.vectors import VectorsSpec
from pooling_operator.vllm.contract import SUPPORTED_VERSIONS, resolve_version
from pooling_operator.vllm.models import ModelFacts, facts

MODE_TASKS = {"crossEncoder": "classify", "biEncoder": "embed", "lateInteraction": "token_embed"}
MODE_ROUTES = {"crossEncoder": "/rerank", "biEncoder": "/rerank", "lateInteraction": "/rerank", "generative": "/generative_scoring"}

JOB_KINDS = FAMILY_KINDS["job"]  # an Indexed Job with vLLM as a native sidecar, not a served Deployment


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str
    namespace: str | None
    model: ModelSpec
    engine: EngineSpec
    runner: str  # pooling | generate
    task: str | None  # the one pooling task, None for generate
    convert: str  # auto | none | embed | classify
    pooling: PoolingSpec | None
    generative: GenerativeSpec | None
    hidden_states: bool
    mode: str | None = None
    vectors: VectorsSpec | None = None  # spec.vectors: outputs, inputs, instructions, the IO-processor plugin

    @property
    def job(self) -> bool:
        """An Indexed Job's sidecar (HiddenStateJob, PoolingJob), not a service's server."""
        return self.kind in JOB_KINDS

    @property
    def served_name(self) -> str:
        return self.model.served_name or self.name

    @cached_property
    def version(self) -> str:
        """The contract version whose rules apply (the newest supported when engine.version and the image tag
        name none: its own problem is reported, the other rules still judge)."""
        version, _ = resolve_version(self.engine.version, self.engine.image)
        return version or SUPPORTED_VERSIONS[-1]

    @property
    def architectures(self) -> list[str] | None:
        """hfOverrides.architectures (what vLLM will load) or else hints.architectures."""
        overrides = self.model.hf_overrides or {}
        archs = overrides.get("architectures")
        if isinstance(archs, list) and archs and all(isinstance(a, str) for a in archs):
            return archs
        return self.model.hints.architectures if self.model.hints else None

    @cached_property
    def facts(self) -> ModelFacts | None:
        """What the version's registry says of the first architecture."""
        return facts(self.architectures, self.version)


def _pooling(r: PoolingService | PoolingJob) -> Workload:
    m, spec = r.metadata, r.spec
    return Workload(r.kind, m.name, m.namespace, spec.model, spec.engine, "pooling", spec.task, spec.convert,
                    spec.pooling, None, False, vectors=spec.vectors)


def _scoring(r: ScoringService | PoolingJob) -> Workload:
    m, spec = r.metadata, r.spec
    assert spec.mode is not None
    generative = spec.mode == "generative"
    return Workload(r.kind, m.name, m.namespace, spec.model, spec.engine, "generate" if generative else "pooling",
                    None if generative else MODE_TASKS[spec.mode], "auto", spec.pooling, spec.generative, False,
                    spec.mode, spec.vectors)


def _hidden_states(r: HiddenStateJob) -> Workload:
    m, spec = r.metadata, r.spec
    return Workload(r.kind, m.name, m.namespace, spec.model, spec.engine, "generate", None, "auto", None, None, True)


# Each workload kind's view, by kind (tests/test_kinds_table.py holds it to the kinds table).
VIEWS: dict[str, Callable[[Any], Workload]] = {
    "PoolingService": _pooling,
    "PoolingJob": lambda r: _pooling(r) if r.spec.mode is None else _scoring(r),
    "ScoringService": _scoring,
    "HiddenStateJob": _hidden_states,
}


def workload(resource: VllmResource) -> Workload:
    """What vLLM is asked to run for a service or job: the one view rules, builders and status read."""
    return VIEWS[resource.kind](resource)
