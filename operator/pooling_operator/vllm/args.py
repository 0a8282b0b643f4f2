"""spec -> `vllm serve` command line, deterministic: same spec, same list, same bytes."""

from __future__ import annotations

import json
import posixpath
from typing import Any

from pooling_operator.api import HiddenStateJob
from pooling_operator.api.resources import VllmResource
from pooling_operator.api.services import SEQUENCE_POOLING
from pooling_operator.api.shard_contract import STAGING_FOLDER, shard_folder
from pooling_operator.vllm.contract import Contract
from pooling_operator.vllm.extra_args import option_names
from pooling_operator.vllm.memory import utilization
from pooling_operator.vllm.metrics import LATENCY_BUCKETS, LATENCY_FAMILY
from pooling_operator.vllm.vectors import COMBINED, served_task
from pooling_operator.vllm.workload import Workload, workload

MODEL_MOUNT = "/models"
MODEL_CACHE_MOUNT = "/model-cache"  # a ModelCache's claim, read-only (its hub cache under hub/)
CACHE_MOUNT = "/cache"  # the pod's scratch folder: HOME, the Hugging Face and vLLM caches
DEFAULT_PORT = 8000


def compact(value: Any) -> str:
    """JSON as vLLM reads it: compact, keys sorted."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def share_utilization(resource: VllmResource) -> float | None:
    """A GPU share's vLLM bound: share.memory over the device (vllm/memory.py)."""
    resources = resource.spec.resources
    return utilization(resources.gpu) if resources and resources.gpu and resources.gpu.share else None


def model_argument(w: Workload) -> str:
    """What `vllm serve` gets as its model: the repo id, or the mounted folder for a volume source."""
    source = w.model.source
    if source is not None and source.volume is not None:
        path = source.volume.path.strip("/")
        return f"{MODEL_MOUNT}/{path}" if path else MODEL_MOUNT
    return w.model.name


def pooler_config(w: Workload) -> dict[str, Any]:
    """--pooler-config: the one task always, pooling type, use_activation, default dimensions, chunking."""
    task = served_task(w)  # the combined task (two outputs) is vLLM's default for its architecture: not set
    config: dict[str, Any] = {"task": task} if task != COMBINED else {}
    pooling = w.pooling
    if pooling is not None:
        if pooling.type is not None:
            key = "seq_pooling_type" if pooling.type in SEQUENCE_POOLING else "tok_pooling_type"
            config[key] = pooling.type
        if pooling.normalize is not None:
            config["use_activation"] = pooling.normalize
        if pooling.dimensions is not None:
            config["dimensions"] = pooling.dimensions
        chunked = pooling.chunked_processing
        if chunked is not None and chunked.enabled:
            config["enable_chunked_processing"] = True
            if chunked.max_embed_len is not None:
                config["max_embed_len"] = chunked.max_embed_len
    return config


def hf_overrides(w: Workload) -> dict[str, Any]:
    overrides = dict(w.model.hf_overrides or {})
    if w.model.matryoshka_dimensions:
        overrides["matryoshka_dimensions"] = sorted(set(w.model.matryoshka_dimensions))
    return overrides


def _max_logprobs(w: Workload, c: Contract) -> int | None:
    """Raised to the label count when above vLLM's default, unless extraArgs already set it."""
    if w.generative is None or "--max-logprobs" in option_names(w.engine.extra_args):
        return None
    count = len(w.generative.labels)
    return count if count > c.max_logprobs_default else None


def storage_path(output_path: str) -> str:
    """vLLM's staging folder for one shard, inside the output volume (the index comes from the pod env)."""
    return f"{output_path.rstrip('/')}/{STAGING_FOLDER}/{shard_folder('$(JOB_COMPLETION_INDEX)')}"


OUTPUT_MOUNT = "/output"
DATASET_MOUNT = "/dataset"


def output_dir(path_in_claim: str) -> str:
    """The output folder as the pod sees it (the claim is mounted at OUTPUT_MOUNT)."""
    return posixpath.normpath(posixpath.join(OUTPUT_MOUNT, path_in_claim.lstrip("/")))


def vllm_command(
    resource: VllmResource,
    c: Contract,
    *,
    port: int | None = None,
    w: Workload | None = None,
) -> list[str]:
    """The vLLM container's full command line (command + args); ``w`` is the resource's workload view when
    the caller already has it."""
    w = w or workload(resource)
    engine = w.engine
    argv = ["vllm", "serve", model_argument(w), "--served-model-name", w.served_name]
    # 0.0.0.0 also for a job's sidecar: the kubelet probes the pod IP, not loopback (no Service exposes it).
    argv += ["--host", "0.0.0.0", "--port", str(port or DEFAULT_PORT)]
    source = w.model.source
    if w.model.revision and (source is None or source.volume is None):  # the Hub, or a ModelCache's snapshot
        argv += ["--revision", w.model.revision]
    if w.model.trust_remote_code:
        argv += ["--trust-remote-code"]
    argv += ["--runner", w.runner]
    if w.runner == "pooling":
        if w.convert != "auto":
            argv += ["--convert", w.convert]
        argv += ["--pooler-config", compact(pooler_config(w))]
        if w.vectors is not None and w.vectors.io_processor_plugin is not None:
            argv += ["--io-processor-plugin", w.vectors.io_processor_plugin]
    overrides = hf_overrides(w)
    if overrides:
        argv += ["--hf-overrides", compact(overrides)]
    for flag, value in (
        ("--dtype", engine.dtype),
        ("--max-model-len", engine.max_model_len),
        ("--max-num-batched-tokens", engine.max_num_batched_tokens),
        ("--max-num-seqs", engine.max_num_seqs),
        ("--tensor-parallel-size", engine.tensor_parallel_size),
        ("--gpu-memory-utilization", share_utilization(resource) or engine.gpu_memory_utilization),
        ("--load-format", engine.load_format),
    ):
        if value is not None:
            argv += [flag, str(value)]
    logprobs = _max_logprobs(w, c)
    if logprobs is not None:
        argv += ["--max-logprobs", str(logprobs)]
    if isinstance(resource, HiddenStateJob):
        spec = resource.spec
        speculative = {
            "method": "extract_hidden_states",
            "num_speculative_tokens": 1,
            "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": list(spec.layers)}},
        }
        extra = {**(spec.connector.extra_config or {}), "shared_storage_path": storage_path(output_dir(spec.output.volume.path))}
        transfer = {"kv_connector": spec.connector.name, "kv_role": "kv_producer", "kv_connector_extra_config": extra}
        argv += ["--speculative-config", compact(speculative), "--kv-transfer-config", compact(transfer)]
        if c.hidden_states_without_chunked_prefill:  # per version: see Contract
            argv.append("--no-enable-chunked-prefill")
    if not w.job:
        # Fixed, fine latency buckets for every service (vllm/metrics.py): p99 is meaningful from milliseconds
        # up, and a change of the autoscaling target never changes the pod template.
        argv += ["--custom-histogram-buckets", compact({LATENCY_FAMILY: list(LATENCY_BUCKETS)})]
    argv += list(engine.extra_args)
    return argv
