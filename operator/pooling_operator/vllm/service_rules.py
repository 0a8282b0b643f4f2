"""The rules of a served model's pooling and scoring: the pooler settings a PoolingService, a PoolingJob and a
biEncoder ScoringService share, the task a model's pooler supports, BGE-M3's tasks, the batched-token bound,
and each ScoringService mode's rules (the "pooling service", "scoring service" and "pooling job" rules of
vllm/rules.py's chains)."""

from __future__ import annotations

from collections.abc import Iterator

from pooling_operator.api import (
    PoolingJob,
    PoolingService,
    ScoringService,
)
from pooling_operator.api import messages as M
from pooling_operator.api.problems import Problem
from pooling_operator.api.services import (
    EMBEDDING_TASKS,
    SEQUENCE_POOLING,
    SEQUENCE_TASKS,
)
from pooling_operator.vllm.contract import (
    Contract,
)
from pooling_operator.vllm.engine_rules import chunk_reason
from pooling_operator.vllm.models import BGE_M3
from pooling_operator.vllm.workload import Workload


def pooling_problems(w: Workload, base: str) -> Iterator[Problem]:
    """Pooler settings shared by PoolingService and a biEncoder ScoringService."""
    pooling = w.pooling
    task = w.task or ""
    if pooling is None:
        return
    if pooling.type is not None and (task in SEQUENCE_TASKS) != (pooling.type in SEQUENCE_POOLING):
        allowed = "CLS, MEAN or LAST" if task in SEQUENCE_TASKS else "ALL or STEP"
        # A biEncoder's CEL rule speaks of biEncoders; a PoolingService's of tasks: say what the API server says.
        shared = M.BIENCODER_SEQUENCE_POOLING if w.mode is not None else M.POOLING_TYPE_FOR_TASK
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


def task_support_problems(w: Workload, task_path: str) -> Iterator[Problem]:
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


def batched_tokens_problems(w: Workload) -> Iterator[Problem]:
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


def pooling_service_problems(resource: PoolingService, w: Workload) -> Iterator[Problem]:
    if resource.spec.space_check is not None and not resource.spec.embedding_space:
        yield Problem("spec.spaceCheck", M.SPACE_CHECK_NEEDS_SPACE)
    yield from pooling_problems(w, "spec.pooling")
    yield from task_support_problems(w, "spec.task")
    yield from batched_tokens_problems(w)


def scoring_service_problems(resource: ScoringService | PoolingJob, w: Workload, c: Contract | None) -> Iterator[Problem]:
    """A ScoringService's mode rules; a PoolingJob with a mode is held to the same (its fields have the same
    names and paths)."""
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
        yield from batched_tokens_problems(w)
        return
    if spec.mode == "biEncoder":
        yield from pooling_problems(w, "spec.pooling")
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
        yield from task_support_problems(w, "spec.mode")
    yield from batched_tokens_problems(w)


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
