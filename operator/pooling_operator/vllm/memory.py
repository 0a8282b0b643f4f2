"""GPU memory for a share of one GPU: the minimum a vLLM server needs, the memory its process sees as its device,
the ``--gpu-memory-utilization`` that bounds it to its share, and the fraction of a GPU a pod holds. Pure.

How vLLM 0.32 spends its bound (the sizing follows it term by term):
- it requests ``ceil(total x gpu_memory_utilization)`` bytes of the device CUDA reports, and refuses to start when
  less is free (v1/worker/utils.py:716-772, ``request_memory``);
- after loading the weights it runs one dummy forward of ``max_num_batched_tokens`` tokens and gives the KV
  cache what is left of the request after weights, the peak activations, non-torch memory and, where CUDA
  graphs are captured and ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` is set, their estimate
  (v1/worker/gpu_worker.py:676-744);
- the KV cache must hold one request of ``max_model_len`` tokens (v1/core/kv_cache_utils.py:1104-1137,
  ``check_enough_kv_cache_memory``); a model without attention KV (an encoder-only one) has no KV cache spec,
  so nothing is checked and nothing is needed there (the same lines: "No need to check ... if the
  kv_cache_spec is empty").
Terms that rest on a constant rather than a vLLM line say so in their basis; none is measured on a GPU yet
(docs/gpu-sharing.md lists them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pooling_operator.api.gpu import GpuSpec, ResourcesSpec
from pooling_operator.api.quantity import binary_quantity, parse_quantity
from pooling_operator.vllm.gpu_tables import PRODUCTS, mig_profile
from pooling_operator.vllm.workload import Workload

MiB = 2**20
GiB = 2**30
# engine.dtype -> bytes per weight and activation. "auto": vLLM keeps a bfloat16/float16 checkpoint's type and
# casts a float32 checkpoint to float16 on a GPU (config/model.py, _get_and_verify_dtype): 2 bytes either way.
DTYPE_BYTES = {"auto": 2, "float16": 2, "bfloat16": 2, "half": 2, "float32": 4, "float": 4}
# vLLM's KV cache block (CacheConfig.block_size default 16 on CUDA); one more block is held back as the null
# block (kv_cache_utils.py:1123-1129, _pool_bytes_per_block).
BLOCK_TOKENS = 16
# Peak activations of the profile run, per token, in hidden-widths: the residual, q, k, v, the attention output
# and a gated MLP's two intermediate tensors (up to 2 x 3.5 hidden in Llama/Qwen-style configs) alive at once in
# an eager layer: 12. A derived bound, not a measured one.
ACTIVATION_WIDTHS = 12
# What vLLM counts as non-torch memory growth during profiling (cuBLAS and cuDNN workspaces, the allocator's
# slack) for one GPU, no NCCL: a constant, not yet measured (bench/ measures it when a GPU is lent).
RESERVE_BYTES = 512 * MiB
# A share above this many times its minimum is warned about: the rest of the device stays idle for others.
FAR_ABOVE = 4


@dataclass(frozen=True)
class Term:
    name: str  # weights | activations | reserve | kvCache
    bytes: int
    basis: str


@dataclass(frozen=True)
class Sizing:
    terms: tuple[Term, ...]
    missing: tuple[str, ...]  # the hints a term needed and did not have (model.hints.<name>)

    @property
    def total(self) -> int:
        return sum(t.bytes for t in self.terms)

    def summary(self) -> str:
        parts = ", ".join(f"{t.name} {binary_quantity(t.bytes)}" for t in self.terms if t.bytes)
        return f"{binary_quantity(self.total)} ({parts})"


def dtype_bytes(dtype: str | None) -> int:
    return DTYPE_BYTES.get(dtype or "auto", 2)


def batched_tokens(w: Workload) -> int | None:
    """The tokens of vLLM's profile run: maxNumBatchedTokens, else the longest request (vLLM's pooling
    default makes a whole prompt one step)."""
    e = w.engine
    hints = w.model.hints
    return e.max_num_batched_tokens or e.max_model_len or (hints.max_model_len if hints else None)


def minimum(w: Workload) -> Sizing:
    """The least GPU memory one server of ``w`` needs inside its vLLM bound."""
    hints = w.model.hints
    width = dtype_bytes(w.engine.dtype)
    terms: list[Term] = []
    missing: list[str] = []
    params = hints.num_parameters if hints else None
    if params:
        terms.append(Term("weights", params * width, f"numParameters {params} x {width} bytes ({w.engine.dtype or 'auto'})"))
    else:
        missing.append("numParameters")
    tokens = batched_tokens(w)
    hidden = hints.hidden_size if hints else None
    if tokens and hidden:
        terms.append(Term(
            "activations", tokens * hidden * ACTIVATION_WIDTHS * width,
            f"{tokens} batched tokens x hiddenSize {hidden} x {ACTIVATION_WIDTHS} widths x {width} bytes (derived bound)",
        ))  # fmt: skip
    else:
        missing.append("hiddenSize" if tokens else "maxModelLen")
    terms.append(Term("reserve", RESERVE_BYTES, "non-torch memory vLLM counts while profiling (a constant, unmeasured)"))
    kv = kv_cache_bytes(w)
    if isinstance(kv, Term):
        terms.append(kv)
    else:
        missing += kv
    return Sizing(tuple(terms), tuple(missing))


def kv_cache_bytes(w: Workload) -> Term | list[str]:
    """One maxModelLen request of KV cache for a decoder; nothing for an encoder-only model. The hints it
    lacks otherwise."""
    f = w.facts
    if f is not None and not f.is_decoder:
        return Term("kvCache", 0, f"{f.architecture} is encoder-only: no KV cache (kv_cache_utils.py:1104-1137)")
    hints = w.model.hints
    length = w.engine.max_model_len or (hints.max_model_len if hints else None)
    need = {"numHiddenLayers": hints.num_hidden_layers if hints else None,
            "numAttentionHeads": hints.num_attention_heads if hints else None,
            "maxModelLen": length}  # fmt: skip
    if hints and not hints.head_dim:
        need["hiddenSize"] = hints.hidden_size
    lacking = [k for k, v in need.items() if not v]
    if lacking or hints is None or length is None:
        return lacking
    heads = hints.num_key_value_heads or hints.num_attention_heads
    head_dim = hints.head_dim or hints.hidden_size // hints.num_attention_heads  # type: ignore[operator]
    blocks = math.ceil(length / BLOCK_TOKENS) + 1
    width = dtype_bytes(w.engine.dtype)
    n = hints.num_hidden_layers * 2 * heads * head_dim * width * blocks * BLOCK_TOKENS  # type: ignore[operator]
    return Term("kvCache", n, (
        f"one {length}-token request: {hints.num_hidden_layers} layers x K and V x {heads} KV heads x head_dim "
        f"{head_dim} x {width} bytes x {blocks} blocks of {BLOCK_TOKENS} (kv_cache_utils.py:1104-1137)"
    ))  # fmt: skip


# ---- the device and the share ------------------------------------------------------------------------------


def product_memory(gpu: GpuSpec) -> int | None:
    """The whole device's memory (NVML's total, vllm/gpu_tables.py): resources.gpu.memory, else the table."""
    if gpu.memory is not None:
        return int(parse_quantity(gpu.memory))
    row = PRODUCTS.get(gpu.product or "")
    return row.mib * MiB if row and row.mib else None


def mig_slice(gpu: GpuSpec) -> tuple[int | None, int | None]:
    """A MIG share's slice: (its memory in bytes, its memory in eighths of the product's); None where unknown.
    The memory is `nvidia-smi mig -lgip`'s where the table has it, else the product's times the fraction."""
    share = gpu.share
    profile = mig_profile(gpu.product, share.mig_profile if share else None)
    if profile is None:
        return None, None
    if profile.mib is not None:
        return profile.mib * MiB, profile.eighths
    total = product_memory(gpu)
    return (total * profile.eighths // 8 if total else None), profile.eighths


def device_memory(gpu: GpuSpec) -> int | None:
    """The memory the vLLM process sees as its device: the product's (time-slicing, a whole-device DRA claim), or
    the MIG slice's (CUDA reports the MIG instance)."""
    if gpu.share is not None and gpu.share.via == "mig":
        return mig_slice(gpu)[0]
    return product_memory(gpu)


def share_bytes(gpu: GpuSpec) -> int | None:
    return int(parse_quantity(gpu.share.memory)) if gpu.share is not None else None


def utilization(gpu: GpuSpec) -> float | None:
    """``--gpu-memory-utilization`` for a share: share.memory over the device, rounded down to 4 decimals so vLLM's
    ceil(total x utilization) never exceeds the share. None without a share or a known device."""
    share, device = share_bytes(gpu), device_memory(gpu)
    if share is None or not device:
        return None
    return math.floor(share / device * 10_000) / 10_000


def share_fraction(gpu: GpuSpec) -> float | None:
    """The fraction of one GPU a share holds: its memory over the product's (time-slicing, DRA), or the MIG
    slice over the product (its memory eighths; from the profile's compute slices, ``<n>g`` of 7, when the
    product's table is unknown). None when neither can be known."""
    share = gpu.share
    if share is None:
        return None
    if share.via == "mig":
        eighths = mig_slice(gpu)[1]
        if eighths is not None:
            return eighths / 8
        return int(share.mig_profile.split("g", 1)[0]) / 7 if share.mig_profile else None
    total = product_memory(gpu)
    bytes_ = share_bytes(gpu)
    return min(1.0, bytes_ / total) if total and bytes_ is not None else None


def gpus_held(resources: ResourcesSpec | None) -> float:
    """The GPUs one pod of a workload holds, from its owner's `spec.resources`: the one function the namespace
    GPU budget, `status.autoscaling`, the gpus-held series and `simulate` count with. Whole GPUs: the count of
    `resources.gpu`, under whatever resource it names (`nvidia.com/gpu`, a MIG slice under the single strategy,
    `amd.com/gpu`), one unit one GPU. A share: the fraction it is (its memory over the device's, or the MIG
    slice over the product). Default: 1. A share whose device is unknown counts as one whole GPU (it is refused
    before a pod exists; this is the budget's safe side)."""
    gpu = resources.gpu if resources else None
    if gpu is None:
        return 1.0
    if gpu.share is not None:
        fraction = share_fraction(gpu)
        return fraction if fraction is not None else 1.0
    return float(gpu.whole)
