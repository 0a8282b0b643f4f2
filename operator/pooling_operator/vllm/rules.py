"""vLLM's rules, per contract version, each returning Problems with the field path and what is accepted.

Every check here is pure: resource values in, Problems out. Each kind has a named chain of rules (CHAINS), all
reading one Subject: the resource, its workload view, its contract and its extraArgs parsed once
(vllm/extra_args.py). Policy and autoscaling rules live in api/policy_rules.py, hidden-state rules in
vllm/hidden_state_rules.py. The cross-field rules that CEL also enforces
at admission carry the same message as their CEL twin (api/), so a user reads one sentence wherever a rule
fires.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from pooling_operator.api import (
    AutoscalingPolicy,
    HiddenStateJob,
    ModelCache,
    PoolingJob,
    PoolingService,
    ScoringService,
)
from pooling_operator.api import messages as M
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.api.policy_rules import autoscaling_problems, policy_problems
from pooling_operator.api.problems import Problem
from pooling_operator.api.services import (
    EMBEDDING_TASKS,
    SEQUENCE_POOLING,
    SEQUENCE_TASKS,
)
from pooling_operator.vllm.carried_rules import carried_size_problems
from pooling_operator.vllm.confinement import CODE_ADVICE, CODE_ENV, OWNED_ENV, outside, paths_message, roots
from pooling_operator.vllm.contract import (
    Contract,
    contract,
    resolve_version,
    version_drift,
)
from pooling_operator.vllm.engine_rules import chunk_reason, extra_args_problems, gpu_problems
from pooling_operator.vllm.extra_args import ExtraArgs
from pooling_operator.vllm.extra_args import parse as parse_extra_args
from pooling_operator.vllm.flag_classes import code_keys
from pooling_operator.vllm.hidden_state_rules import hidden_state_problems, job_problems
from pooling_operator.vllm.model_rules import matryoshka_bound, remote_code_problems
from pooling_operator.vllm.models import BGE_M3
from pooling_operator.vllm.name_rules import cache_name_problems, model_name_problems
from pooling_operator.vllm.share_rules import share_problems
from pooling_operator.vllm.storage_rules import (
    cache_problems,
    compile_cache_problems,
    embedding_space_cache_problems,
    load_format_problems,
    source_problems,
)
from pooling_operator.vllm.workload import Workload, workload

__all__ = ["CHAINS", "Judgement", "Settings", "check", "judge"]


@dataclass(frozen=True)
class Settings:
    """Operator-wide settings that validation and building depend on."""

    allow_trust_remote_code: bool = False
    hub_endpoint: str | None = None  # the Hugging Face endpoint a ModelCache's fill uses (a mirror); None: the Hub


SECRET_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")  # VLLM_API_KEY: refused in any form (vllm/confinement.py)


@dataclass(frozen=True)
class Subject:
    """What every rule of a chain reads: the resource, its workload view, its contract (None when the version
    is unsupported) and its extraArgs parsed once, plus what the caller knows of policies and namespaces."""

    resource: PoolingService | ScoringService | HiddenStateJob | PoolingJob
    w: Workload
    c: Contract | None
    xa: ExtraArgs | None
    settings: Settings
    policies: Mapping[str, AutoscalingPolicySpec] | None
    namespace_labels: Mapping[str, str] | None


Rule = Callable[[Subject], Iterable[Problem]]


def model_and_engine(s: Subject) -> Iterable[Problem]:
    """Source, revision, trust, env and batching of every vLLM server (the version's own problem too)."""
    yield from _common(s.w, s.settings)
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
    yield from _pooling_service(s.resource, s.w)


def scoring_service(s: Subject) -> Iterable[Problem]:
    assert isinstance(s.resource, ScoringService)
    yield from _scoring_service(s.resource, s.w, s.c)


def hidden_state_job(s: Subject) -> Iterable[Problem]:
    assert isinstance(s.resource, HiddenStateJob)
    yield from hidden_state_problems(s.resource, s.w)
    yield from _batched_tokens(s.w)


def pooling_job(s: Subject) -> Iterable[Problem]:
    """A PoolingJob's vLLM is a PoolingService's (the same rules, the same messages), run as a Job."""
    assert isinstance(s.resource, PoolingJob)
    yield from job_problems(s.resource)
    yield from _pooling(s.w, "spec.pooling")
    yield from _task_support(s.w, "spec.task")
    yield from _batched_tokens(s.w)


def autoscaling(s: Subject) -> Iterable[Problem]:
    a = getattr(s.resource.spec, "autoscaling", None)
    if a is not None:
        yield from autoscaling_problems(a, s.policies, s.namespace_labels)


def network_policy(s: Subject) -> Iterable[Problem]:
    np = getattr(s.resource.spec, "network_policy", None)
    selector = np.client_namespaces if np is not None else None
    for i, req in enumerate((selector.match_expressions or []) if selector else []):
        wants = req.operator in ("In", "NotIn")
        if wants != bool(req.values):
            path = f"spec.networkPolicy.clientNamespaces.matchExpressions[{i}].values"
            yield Problem(path, f"{req.operator} needs a non-empty values list" if wants else f"{req.operator} takes no values")


# The named rule chains, per kind: a resource is valid when every rule of its chain yields nothing.
CHAINS: dict[type, tuple[Rule, ...]] = {
    PoolingService: (model_and_engine, storage, extra_args, gpus, pooling_service, autoscaling, network_policy),
    ScoringService: (model_and_engine, storage, extra_args, gpus, scoring_service, autoscaling, network_policy),
    HiddenStateJob: (model_and_engine, storage, extra_args, gpus, hidden_state_job),
    PoolingJob: (model_and_engine, storage, extra_args, gpus, pooling_job),
}


@dataclass(frozen=True)
class Judgement:
    """Every problem of a resource, and what judging it resolved (its workload view and contract; None for a
    policy, and the contract None when the version is unsupported)."""

    problems: list[Problem]
    workload: Workload | None = None
    contract: Contract | None = None


def judge(
    resource: PoolingService | ScoringService | HiddenStateJob | PoolingJob | AutoscalingPolicy | ModelCache,
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
    problems = [p for rule in CHAINS[type(resource)] for p in rule(subject)]
    return Judgement(sorted(set(problems), key=lambda p: (p.severity != "error", p.path, p.message)), w, c)


def check(
    resource: PoolingService | ScoringService | HiddenStateJob | PoolingJob | AutoscalingPolicy,
    settings: Settings | None = None,
    policies: Mapping[str, AutoscalingPolicySpec] | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> list[Problem]:
    """Every problem of the resource (`judge`); empty when it is valid."""
    return judge(resource, settings, policies, namespace_labels).problems


def _needs_metrics(resource: object) -> bool:
    spec = getattr(resource, "spec", None)
    monitoring = getattr(spec, "monitoring", None)
    return bool(
        getattr(spec, "autoscaling", None)
        or (monitoring and (monitoring.service_monitor or monitoring.pod_monitor))
    )


# ---- model and engine (every workload) --------------------------------------------------------------------


def _common(w: Workload, settings: Settings) -> Iterator[Problem]:
    model, engine = w.model, w.engine
    if model.trust_remote_code and not settings.allow_trust_remote_code:
        yield Problem(
            "spec.model.trustRemoteCode",
            "running a model repository's own code is not allowed by this operator's settings "
            "(--allow-trust-remote-code); use a model vLLM supports natively or ask the platform team",
        )
    if model.matryoshka_dimensions and len(set(model.matryoshka_dimensions)) != len(model.matryoshka_dimensions):
        yield Problem("spec.model.matryoshkaDimensions", "sizes must be distinct")
    for key, field in (("matryoshka_dimensions", "spec.model.matryoshkaDimensions"), ("is_matryoshka", "spec.model.matryoshkaDimensions")):
        if model.hf_overrides and key in model.hf_overrides:
            yield Problem(
                f"spec.model.hfOverrides.{key}",
                f"{key} is owned by the typed field {field}; declare the Matryoshka sizes there",
            )
    yield from matryoshka_bound(model)
    if model.hf_overrides and not settings.allow_trust_remote_code:
        for key, why in code_keys("--hf-overrides", "--hf-overrides", json.dumps(model.hf_overrides)):
            yield Problem(f"spec.model.hfOverrides.{key}", f"{key} {why}: {CODE_ADVICE}")
    archs = (model.hf_overrides or {}).get("architectures")
    if archs is not None and not (isinstance(archs, list) and archs and all(isinstance(a, str) and a for a in archs)):
        yield Problem("spec.model.hfOverrides.architectures", "must be a non-empty list of architecture names")
    hints = model.hints
    if hints and hints.max_model_len and engine.max_model_len and engine.max_model_len > hints.max_model_len:
        yield Problem(
            "spec.engine.maxModelLen",
            f"{engine.max_model_len} is longer than the model allows (model.hints.maxModelLen "
            f"{hints.max_model_len}); vLLM refuses it at startup; use at most {hints.max_model_len}",
        )
    if hints and hints.num_attention_heads and engine.tensor_parallel_size:
        if hints.num_attention_heads % engine.tensor_parallel_size:
            divisors = [d for d in range(1, hints.num_attention_heads + 1) if hints.num_attention_heads % d == 0 and d <= 64]
            yield Problem(
                "spec.engine.tensorParallelSize",
                f"{engine.tensor_parallel_size} does not divide the model's {hints.num_attention_heads} attention "
                f"heads; use one of {divisors}",
            )
    if engine.max_num_batched_tokens and engine.max_num_seqs and engine.max_num_batched_tokens < engine.max_num_seqs:
        yield Problem(
            "spec.engine.maxNumBatchedTokens",
            f"{engine.max_num_batched_tokens} is below maxNumSeqs {engine.max_num_seqs}; vLLM requires "
            "maxNumBatchedTokens >= maxNumSeqs",
        )
    for i, env in enumerate(engine.env):
        if env.name in SECRET_ENV and env.value is not None:
            yield Problem(
                f"spec.engine.env[{i}].value",
                f"{env.name} is a secret: take it from a Secret (valueFrom.secretKeyRef, or the typed "
                "apiKeySecretRef / tokenSecretRef fields), never a literal value",
            )
        if env.name == "VLLM_PORT" and env.value is not None and not env.value.isdigit():
            yield Problem(
                f"spec.engine.env[{i}].value",
                f"VLLM_PORT must be a port number; vLLM refuses {env.value!r} at startup ('appears to be a URI')",
            )
        if env.value is not None and env.value_from is not None:
            yield Problem(f"spec.engine.env[{i}]", "set value or valueFrom, not both")
        yield from _env_confinement(i, env.name, env.value, w, settings)


def _env_confinement(i: int, name: str, value: str | None, w: Workload, settings: Settings) -> Iterator[Problem]:
    if name in OWNED_ENV:
        yield Problem(f"spec.engine.env[{i}].name", f"{name} is not set through env: {OWNED_ENV[name]}")
    elif name in CODE_ENV and not settings.allow_trust_remote_code:
        yield Problem(f"spec.engine.env[{i}].name", f"{name} {CODE_ENV[name]}: {CODE_ADVICE}")
    if value is not None:
        allowed = roots(w)
        found = outside(value, allowed)
        if found is not None:
            yield Problem(f"spec.engine.env[{i}].value", f"{name}: {paths_message(found, allowed)}")


# ---- PoolingService ----------------------------------------------------------------------------------------


def _pooling(w: Workload, base: str) -> Iterator[Problem]:
    """Pooler settings shared by PoolingService and a biEncoder ScoringService."""
    pooling = w.pooling
    task = w.task or ""
    if pooling is None:
        return
    if pooling.type is not None and (task in SEQUENCE_TASKS) != (pooling.type in SEQUENCE_POOLING):
        allowed = "CLS, MEAN or LAST" if task in SEQUENCE_TASKS else "ALL or STEP"
        # A biEncoder's CEL rule speaks of biEncoders; a PoolingService's of tasks: say what the API server says.
        shared = M.BIENCODER_SEQUENCE_POOLING if w.kind == "ScoringService" else M.POOLING_TYPE_FOR_TASK
        yield Problem(f"{base}.type", f"{pooling.type} does not fit task {task}: {shared} (use {allowed})")
    if pooling.dimensions is not None:
        declared = w.model.matryoshka_dimensions
        if task not in EMBEDDING_TASKS:
            yield Problem(f"{base}.dimensions", M.DIMENSIONS_EMBEDDING_ONLY)
        elif not declared:
            yield Problem(
                f"{base}.dimensions",
                f"{M.MATRYOSHKA_DIMENSIONS}: the model declares no Matryoshka support, so vLLM would answer "
                "every embedding request with 400",
            )
        elif pooling.dimensions not in declared:
            yield Problem(
                f"{base}.dimensions",
                f"{M.MATRYOSHKA_DIMENSIONS}: {pooling.dimensions} is not in {sorted(declared)}",
            )
    chunked = pooling.chunked_processing
    if chunked and chunked.max_embed_len and not chunked.enabled:
        yield Problem(f"{base}.chunkedProcessing.maxEmbedLen", "applies only when chunkedProcessing.enabled is true")
    if chunked and chunked.enabled and task != "embed":
        yield Problem(f"{base}.chunkedProcessing.enabled", "chunked processing applies only to the embed task")


def _task_support(w: Workload, task_path: str) -> Iterator[Problem]:
    """The task must be one the (converted) model supports; else vLLM dies at startup."""
    task, convert = w.task or "", w.convert
    if convert == "embed" and task not in EMBEDDING_TASKS:
        yield Problem(
            "spec.convert",
            f"convert embed adapts a model to embed or token_embed, not {task}; use convert classify or auto",
        )
    if convert == "classify" and task in EMBEDDING_TASKS:
        yield Problem(
            "spec.convert",
            f"convert classify adapts a model to classify or token_classify, not {task}; use convert embed or auto",
        )
    f = w.facts
    if _is_bge_m3(w) and task in ("token_embed", "token_classify") and (f is None or f.architecture != BGE_M3):
        # Without the override vLLM loads XLMRobertaModel: token_classify does not exist, and token_embed
        # returns the raw per-token hidden states (served, as vLLM's own multi-vector retrieval test does),
        # not BGE-M3's ColBERT vectors.
        yield _bge_m3_problem(task)
        if task == "token_classify":
            return
    if f is None:
        return
    if f.native == "generate" and convert == "none":
        what = "a generative model" if f.generates else f"not a pooling class in vLLM {f.version} (runner auto adapts it with convert {f.entry.convert})"
        yield Problem(
            "spec.convert",
            f"{f.architecture} is {what}: it does not support the pooling runner without a conversion; "
            "use convert auto, embed or classify",
        )
        return
    if f.native != "generate" and convert in ("embed", "classify"):
        native_tasks = f.supported_tasks("none")
        if task not in native_tasks:
            yield Problem(
                "spec.convert",
                f"convert {convert} has no effect on {f.architecture}, which is already a pooling model serving "
                f"{', '.join(native_tasks)}; vLLM would fail at startup with 'Unsupported task: {task}'",
            )
            return
    supported = f.supported_tasks(convert)
    if task not in supported:
        yield Problem(
            task_path,
            f"{f.architecture} (convert {convert}) serves {', '.join(supported)}, not {task}; vLLM would fail at "
            f"startup with 'Unsupported task: {task}'",
        )


def _is_bge_m3(w: Workload) -> bool:
    return w.model.name.lower().rstrip("/").endswith("bge-m3")


def _bge_m3_problem(task: str) -> Problem:
    if task == "token_embed":
        return Problem(
            "spec.model.hfOverrides.architectures",
            "without vLLM's BgeM3EmbeddingModel override the repository's XLMRobertaModel is loaded, and token_embed "
            "answers with its raw per-token hidden states (one 1024-wide vector per token, BOS and EOS included), "
            f"not BGE-M3's ColBERT vectors; for those set model.hfOverrides.architectures to [{BGE_M3}]",
            "warning",
        )
    return Problem(
        "spec.model.hfOverrides.architectures",
        f"BGE-M3's sparse (token_classify) head exists only in vLLM's {BGE_M3}: set model.hfOverrides.architectures "
        f"to [{BGE_M3}] (the repository declares XLMRobertaModel)",
    )


def _batched_tokens(w: Workload) -> Iterator[Problem]:
    """maxNumBatchedTokens >= maxModelLen wherever vLLM cannot chunk the prompt (config/scheduler.py:314-326)."""
    engine = w.engine
    mnbt = engine.max_num_batched_tokens
    mml = engine.max_model_len or (w.model.hints.max_model_len if w.model.hints else None)
    if not mnbt or not mml or mnbt >= mml:
        return
    reason = chunk_reason(w)
    if reason is None:
        return
    field = "maxModelLen" if engine.max_model_len else "model.hints.maxModelLen"
    yield Problem(
        "spec.engine.maxNumBatchedTokens",
        f"{mnbt} is smaller than {field} {mml}: {reason}; raise maxNumBatchedTokens to at least {mml} or lower "
        "maxModelLen",
    )


def _pooling_service(resource: PoolingService, w: Workload) -> Iterator[Problem]:
    yield from _pooling(w, "spec.pooling")
    yield from _task_support(w, "spec.task")
    yield from _batched_tokens(w)


# ---- ScoringService ----------------------------------------------------------------------------------------


def _scoring_service(resource: ScoringService, w: Workload, c: Contract | None) -> Iterator[Problem]:
    spec = resource.spec
    if (spec.mode == "generative") != (spec.generative is not None):
        yield Problem("spec.generative", M.GENERATIVE_IFF_MODE)
    if spec.pooling is not None and spec.mode != "biEncoder":
        yield Problem("spec.pooling", M.POOLING_BIENCODER_ONLY)
    hints = w.model.hints
    f = w.facts
    if spec.mode == "generative":
        if f is not None and not f.generates:
            yield Problem(
                "spec.model.hints.architectures",
                f"generative scoring needs a causal LM (runner generate); {f.architecture} is a pooling model in vLLM "
                f"{f.version} ({f.entry.where})",
            )
        if spec.generative is not None:
            yield from _labels(spec, c)
        yield from _batched_tokens(w)
        return
    if spec.mode == "biEncoder":
        yield from _pooling(w, "spec.pooling")
    if spec.mode == "crossEncoder" and hints and hints.num_labels is not None and hints.num_labels != 1:
        yield Problem(
            "spec.model.hints.numLabels",
            f"a cross-encoder scores with one output, but the model has {hints.num_labels} labels; vLLM mounts "
            "/score and /rerank only when num_labels == 1 (serve it as a PoolingService with task classify)",
        )
    if spec.mode == "lateInteraction" and f is not None and "token_embed" not in f.supported_tasks("auto"):
        yield Problem(
            "spec.model.hints.architectures",
            f"late interaction needs per-token embeddings (token_embed); {f.architecture} serves "
            f"{', '.join(f.supported_tasks('auto'))}",
        )
    else:
        yield from _task_support(w, "spec.mode")
    yield from _batched_tokens(w)


def _labels(spec: object, c: Contract | None) -> Iterator[Problem]:
    generative = spec.generative  # type: ignore[attr-defined]
    hints = spec.model.hints  # type: ignore[attr-defined]
    labels = generative.labels
    limit = c.max_logprob_token_ids if c else 128
    if len(labels) > limit:
        yield Problem("spec.generative.labels", f"at most {limit} label tokens (vLLM's logprob_token_ids limit); got {len(labels)}")
    seen: dict[int, int] = {}
    for i, label in enumerate(labels):
        if label.id in seen:
            yield Problem(
                f"spec.generative.labels[{i}].id",
                f"{M.LABELS_DISTINCT}: {label.id} repeats labels[{seen[label.id]}]",
            )
        seen.setdefault(label.id, i)
        if hints and hints.vocab_size is not None and label.id >= hints.vocab_size:
            yield Problem(
                f"spec.generative.labels[{i}].id",
                f"{label.id} is out of the vocabulary range [0, {hints.vocab_size}) (model.hints.vocabSize)",
            )


# ---- HiddenStateJob ----------------------------------------------------------------------------------------


