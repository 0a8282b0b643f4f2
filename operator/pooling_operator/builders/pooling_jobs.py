"""PoolingJob -> ServiceAccount, Role, RoleBinding, progress ConfigMap and the Indexed Job.

Each shard's pod runs, in order: the preflight (the operator's image: the corpus read, counted and its bad lines
reported before vLLM starts), vLLM with runner pooling as a native sidecar, and the driver sending the shard's
inputs in batches (api/pooling_job_contract). The children are a HiddenStateJob's (builders/jobs.py).
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from pooling_operator.api import PoolingJob
from pooling_operator.api import shard_contract as hs
from pooling_operator.api.pooling_job_contract import (
    OPENAI_BATCH,
    SAFETENSORS,
    SPACE_CANARIES_MOUNT,
    SPACE_REFERENCE_MOUNT,
    rows_dtype,
)
from pooling_operator.builders import names
from pooling_operator.builders.common import BuildContext, dra_claim_templates, dra_pod_claims, vllm_volumes
from pooling_operator.builders.jobs import (
    dataset_mount,
    driver_container,
    indexed_job,
    job_children,
    output_mount,
    shard_budget_bytes,
    sidecar,
)
from pooling_operator.vllm.args import DATASET_MOUNT, DEFAULT_PORT, output_dir
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.embedding_space import embedding_fingerprint
from pooling_operator.vllm.space_check import reference_name
from pooling_operator.vllm.vectors import vectors_status
from pooling_operator.vllm.workload import Workload

CANARIES_FILE = "canaries.jsonl"  # the user's canaries, as mounted in a shard's driver


def run_info(resource: PoolingJob, w: Workload, argv: list[str]) -> str:
    """What the driver records in each shard's run.json: model, revision, image, vLLM's full command line, and
    the task and the embedding space (label and fingerprint: the one a PoolingService with this model and pooling
    publishes), or the scoring mode."""
    spec = resource.spec
    if spec.mode is not None:
        return hs.run_info(w.model.name, w.model.revision, w.engine.image, argv, mode=spec.mode)
    space = {"label": spec.embedding_space, "fingerprint": embedding_fingerprint(w)}
    vectors = vectors_status(w) if spec.vectors is not None else None  # an index keeps its contract: instructions
    return hs.run_info(w.model.name, w.model.revision, w.engine.image, argv, task=spec.task, embeddingSpace=space,
                       **({"vectors": vectors} if vectors else {}))


def work_args(resource: PoolingJob) -> list[str]:
    """What each input asks of vLLM: the pooling task, or nothing more than the scoring mode (shard_args) but a
    generative one's labels, as its ScoringService publishes them for clients in status.contract."""
    spec = resource.spec
    if spec.mode is None:
        assert spec.task is not None  # validated: exactly one of task or mode
        return ["--task", spec.task]
    out: list[str] = []
    g = spec.generative
    if g is not None:
        out += ["--label-token-ids", ",".join(str(label.id) for label in g.labels)]
        out += ["--apply-softmax" if g.apply_softmax else "--no-apply-softmax"]
        if g.item_first:
            out += ["--item-first"]
    return out


def shard_args(resource: PoolingJob, w: Workload) -> list[str]:
    spec = resource.spec
    return [
        "--shard", "$(JOB_COMPLETION_INDEX)",
        "--shards", str(spec.shards),
        "--dataset", posixpath.join(DATASET_MOUNT, spec.dataset.volume.path.lstrip("/")),
        "--progress-configmap", names.progress_configmap(w.name),
        *(["--mode", spec.mode] if spec.mode is not None else []),  # how a line reads
        *batch_file_args(resource, w),
    ]  # fmt: skip


def batch_file_args(resource: PoolingJob, w: Workload) -> list[str]:
    """An OpenAI Batch input file: its format, and the names its lines' body.model may give (the served name and
    model.name; nothing for the default jsonl, so those Jobs render as before)."""
    if resource.spec.dataset.format != OPENAI_BATCH:
        return []
    out = ["--format", OPENAI_BATCH]
    for name in dict.fromkeys([w.served_name, w.model.name]):
        out += ["--model-name", name]
    return out


def driver_args(resource: PoolingJob, w: Workload, argv: list[str]) -> list[str]:
    spec = resource.spec
    args = [
        "pooling-job", "run", *shard_args(resource, w),
        "--output", output_dir(spec.output.volume.path),
        "--endpoint", f"http://127.0.0.1:{DEFAULT_PORT}",
        "--model", w.served_name,
        *work_args(resource),
        "--batch-size", str(spec.batch_size),
        "--dtype", rows_dtype(spec.engine.dtype, spec.mode),
        "--run-info", run_info(resource, w, argv),
    ]  # fmt: skip
    budget = shard_budget_bytes(resource)
    if budget is not None:
        args += ["--budget-bytes", str(budget)]
    check = spec.space_check
    if check is not None and spec.embedding_space:
        args += ["--space-check", json.dumps({
            "fingerprint": embedding_fingerprint(w), "label": spec.embedding_space, "minCosine": check.threshold,
            "normalize": bool(w.pooling and w.pooling.normalize), "reference": SPACE_REFERENCE_MOUNT,
            **({"canaries": posixpath.join(SPACE_CANARIES_MOUNT, CANARIES_FILE)} if check.canaries else {}),
        }, separators=(",", ":"))]  # fmt: skip
    if spec.output.formats != [SAFETENSORS]:
        args += ["--outputs", ",".join(spec.output.formats)]
    if spec.vectors is not None and spec.vectors.document_instruction is not None:
        args += ["--document-instruction", spec.vectors.document_instruction]
    return args


def space_volumes(resource: PoolingJob) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """spec.spaceCheck: the space's reference ConfigMap (a PoolingService of the label records it; optional: there
    may be none yet) and the user's canaries, as the driver's volumes and mounts."""
    check, label = resource.spec.space_check, resource.spec.embedding_space
    if check is None or not label:
        return [], []
    volumes = [{"name": "space-reference", "configMap": {"name": reference_name(label), "optional": True}}]
    mounts = [{"name": "space-reference", "mountPath": SPACE_REFERENCE_MOUNT, "readOnly": True}]
    if check.canaries is not None:
        ref = check.canaries.config_map_ref
        volumes.append({"name": "space-canaries", "configMap": {"name": ref.name, "optional": True,
                                                                 "items": [{"key": ref.key, "path": CANARIES_FILE}]}})
        mounts.append({"name": "space-canaries", "mountPath": SPACE_CANARIES_MOUNT, "readOnly": True})
    return volumes, mounts


def job(resource: PoolingJob, w: Workload, argv: list[str], ctx: BuildContext) -> dict[str, Any]:
    volumes, mounts = vllm_volumes(w, ctx.model_cache)
    preflight = driver_container("preflight", ["pooling-job", "preflight", *shard_args(resource, w)], ctx, [dataset_mount()])
    vllm = sidecar(w, argv, resource.spec.resources, mounts)
    space, space_mounts = space_volumes(resource)
    driver = driver_container("driver", driver_args(resource, w, argv), ctx, [dataset_mount(), output_mount(), *space_mounts])
    out = indexed_job(resource, w, ctx, [preflight, vllm], driver, [*volumes, *space])
    out["spec"]["template"]["spec"].update(dra_pod_claims(w, resource.spec.resources))  # a DRA share's claim
    return out


def build_pooling_job(resource: PoolingJob, c: Contract, ctx: BuildContext, w: Workload, argv: list[str]) -> list[dict[str, Any]]:
    """Every child of a PoolingJob (builders.plan resolves the workload view and vLLM's command line once)."""
    templates = dra_claim_templates(resource.metadata.uid, w, resource.spec.resources)  # before the pods that name it
    return [*templates, *job_children(w, resource.metadata.uid, job(resource, w, argv, ctx))]
