"""vLLM's rules, per contract version, each returning Problems with the field path and what is accepted.

Every check here is pure: resource values in, Problems out. Each kind has a named chain of rules (CHAINS), all
reading one Subject: the resource, its workload view, its contract and its extraArgs parsed once
(vllm/extra_args.py). The rules themselves live beside it: every server's in vllm/workload_rules.py, pooling
and scoring in vllm/service_rules.py, hidden-state rules in vllm/hidden_state_rules.py, policy and autoscaling
rules in api/policy_rules.py. The cross-field rules that CEL also enforces
at admission carry the same message as their CEL twin (api/), so a user reads one sentence wherever a rule
fires.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from pooling_operator.api import (
    AutoscalingPolicy,
    HiddenStateJob,
    ModelCache,
    PoolingJob,
    PoolingService,
    ScoringService,
)
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.policy_rules import autoscaling_problems, policy_problems
from pooling_operator.api.problems import Problem
from pooling_operator.api.resources import AnyResource, Service, VllmResource
from pooling_operator.vllm.batch_file_rules import batch_file_problems
from pooling_operator.vllm.carried_rules import carried_size_problems
from pooling_operator.vllm.contract import (
    Contract,
    contract,
    resolve_version,
    version_drift,
)
from pooling_operator.vllm.engine_rules import extra_args_problems, gpu_problems
from pooling_operator.vllm.extra_args import ExtraArgs
from pooling_operator.vllm.extra_args import parse as parse_extra_args
from pooling_operator.vllm.hidden_state_rules import hidden_state_problems, job_problems
from pooling_operator.vllm.model_rules import remote_code_problems
from pooling_operator.vllm.name_rules import cache_name_problems, model_name_problems
from pooling_operator.vllm.router import routing_problems
from pooling_operator.vllm.service_rules import (
    batched_tokens_problems,
    pooling_problems,
    pooling_service_problems,
    scoring_service_problems,
    task_support_problems,
)
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.share_rules import share_problems
from pooling_operator.vllm.storage_rules import (
    cache_problems,
    compile_cache_problems,
    embedding_space_cache_problems,
    load_format_problems,
    source_problems,
)
from pooling_operator.vllm.vectors_rules import vectors_problems
from pooling_operator.vllm.workload import Workload, workload
from pooling_operator.vllm.workload_rules import common_problems

__all__ = ["CHAINS", "Judgement", "check", "judge"]






@dataclass(frozen=True)
class Subject:
    """What every rule of a chain reads: the resource, its workload view, its contract (None when the version
    is unsupported) and its extraArgs parsed once, plus what the caller knows of policies and namespaces."""

    resource: VllmResource
    w: Workload
    c: Contract | None
    xa: ExtraArgs | None
    settings: Settings
    policies: Mapping[str, AutoscalingPolicySpec] | None
    namespace_labels: Mapping[str, str] | None


Rule = Callable[[Subject], Iterable[Problem]]


def model_and_engine(s: Subject) -> Iterable[Problem]:
    """Source, revision, trust, env and batching of every vLLM server (the version's own problem too)."""
    yield from common_problems(s.w, s.settings)
    yield from model_name_problems(s.w.model)
    yield from carried_size_problems(s.w)
    yield from remote_code_problems(s.w)
    _, error = resolve_version(s.w.engine.version, s.w.engine.image)
    if error:
        yield Problem("spec.engine.version" if s.w.engine.version else "spec.engine.image", error)
    drift = version_drift(s.w.engine.version, s.w.engine.image)
    if drift and not error:
        yield Problem("spec.engine.version", drift, "warning")


def storage(s: Subject) -> Iterable[Problem]:
    """How the weights (and compiled graphs) reach the server: vllm/storage_rules.py."""
    yield from source_problems(s.w)
    yield from load_format_problems(s.w, s.c.version if s.c else None)
    yield from compile_cache_problems(s.w)
    yield from embedding_space_cache_problems(s.resource, s.w)


def extra_args(s: Subject) -> Iterable[Problem]:
    if s.c is not None and s.xa is not None:
        yield from extra_args_problems(s.w, s.c, s.xa, _needs_metrics(s.resource), s.settings.allow_trust_remote_code)


def gpus(s: Subject) -> Iterable[Problem]:
    if s.xa is not None:
        yield from gpu_problems(s.w, s.xa, s.resource.spec.resources)
        yield from share_problems(s.w, s.xa, s.resource.spec.resources)


def pooling_service(s: Subject) -> Iterable[Problem]:
    assert isinstance(s.resource, PoolingService)
    yield from pooling_service_problems(s.resource, s.w)


def scoring_service(s: Subject) -> Iterable[Problem]:
    assert isinstance(s.resource, ScoringService)
    yield from scoring_service_problems(s.resource, s.w, s.c)


def hidden_state_job(s: Subject) -> Iterable[Problem]:
    assert isinstance(s.resource, HiddenStateJob)
    yield from hidden_state_problems(s.resource, s.w)
    yield from batched_tokens_problems(s.w)


def pooling_job(s: Subject) -> Iterable[Problem]:
    """A PoolingJob's vLLM is a PoolingService's (the same rules, the same messages), run as a Job; with a mode,
    a ScoringService's of that mode."""
    assert isinstance(s.resource, PoolingJob)
    yield from job_problems(s.resource)
    yield from batch_file_problems(s.resource)
    if s.resource.spec.mode is not None:
        yield from scoring_service_problems(s.resource, s.w, s.c)
        return
    if s.resource.spec.task is None:
        return  # neither task nor mode: said above
    yield from pooling_problems(s.w, "spec.pooling")
    yield from task_support_problems(s.w, "spec.task")
    yield from batched_tokens_problems(s.w)


def autoscaling(s: Subject) -> Iterable[Problem]:
    assert isinstance(s.resource, Service)  # a service's chain only
    a = s.resource.spec.autoscaling
    if a is not None:
        yield from autoscaling_problems(a, s.policies, s.namespace_labels)


def vectors(s: Subject) -> Iterable[Problem]:
    """What the server returns and takes (spec.vectors): vllm/vectors_rules.py."""
    yield from vectors_problems(s.w, s.settings)


def routing(s: Subject) -> Iterable[Problem]:
    """The router in front (spec.routing): vllm/router.py."""
    assert isinstance(s.resource, Service)
    yield from routing_problems(s.resource, s.w, s.c)


def network_policy(s: Subject) -> Iterable[Problem]:
    assert isinstance(s.resource, Service)  # a service's chain only
    np = s.resource.spec.network_policy
    selector = np.client_namespaces if np is not None else None
    for i, req in enumerate((selector.match_expressions or []) if selector else []):
        wants = req.operator in ("In", "NotIn")
        if wants != bool(req.values):
            path = f"spec.networkPolicy.clientNamespaces.matchExpressions[{i}].values"
            yield Problem(path, f"{req.operator} needs a non-empty values list" if wants else f"{req.operator} takes no values")


# The named rule chains, per kind: a resource is valid when every rule of its chain yields nothing.
CHAINS: dict[str, tuple[Rule, ...]] = {  # by kind, as builders.BUILDERS
    "PoolingService": (model_and_engine, storage, extra_args, gpus, pooling_service, vectors, autoscaling, network_policy,
                       routing),
    "ScoringService": (model_and_engine, storage, extra_args, gpus, scoring_service, vectors, autoscaling, network_policy,
                       routing),
    "HiddenStateJob": (model_and_engine, storage, extra_args, gpus, hidden_state_job),
    "PoolingJob": (model_and_engine, storage, extra_args, gpus, pooling_job, vectors),
}


@dataclass(frozen=True)
class Judgement:
    """Every problem of a resource, and what judging it resolved (its workload view and contract; None for a
    policy, and the contract None when the version is unsupported)."""

    problems: list[Problem]
    workload: Workload | None = None
    contract: Contract | None = None


def judge(
    resource: AnyResource,
    settings: Settings | None = None,
    policies: Mapping[str, AutoscalingPolicySpec] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> Judgement:
    """Every rule of the resource's chain (CHAINS). With the namespace's labels (the reconcile knows them, the
    offline CLI does not) policies apply only where their namespaceSelector selects, exactly as the autoscaler
    resolves them."""
    if isinstance(resource, AutoscalingPolicy):
        return Judgement(sorted(policy_problems(resource)))
    if isinstance(resource, ModelCache):
        problems = [*cache_problems(resource), *cache_name_problems(resource)]
        return Judgement(sorted(problems, key=lambda p: (p.severity != "error", p.path, p.message)))
    w = workload(resource)
    version, _ = resolve_version(w.engine.version, w.engine.image)
    c = contract(version) if version else None
    xa = parse_extra_args(w.engine.extra_args, c) if c is not None else None  # once, for every rule
    subject = Subject(resource, w, c, xa, settings or Settings(), policies, namespace_labels)
    problems = [p for rule in CHAINS[resource.kind] for p in rule(subject)]
    return Judgement(sorted(set(problems), key=lambda p: (p.severity != "error", p.path, p.message)), w, c)


def check(
    resource: AnyResource,
    settings: Settings | None = None,
    policies: Mapping[str, AutoscalingPolicySpec] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Every problem of the resource (`judge`); empty when it is valid."""
    return judge(resource, settings, policies, namespace_labels).problems


def _needs_metrics(resource: VllmResource) -> bool:
    """A service that autoscales or is scraped (a job's sidecar is neither)."""
    if not isinstance(resource, Service):
        return False
    monitoring = resource.spec.monitoring
    return bool(resource.spec.autoscaling or monitoring.service_monitor or monitoring.pod_monitor)
