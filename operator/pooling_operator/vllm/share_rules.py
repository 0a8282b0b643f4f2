"""The rules of a GPU share (`resources.gpu.share`): what it replaces, what it needs to be rendered, and whether it
holds the model (vllm/memory.py). Pure; read by the chains of vllm/rules.py."""

from __future__ import annotations

from collections.abc import Iterator

from pooling_operator.api import messages as M
from pooling_operator.api.gpu import GpuSpec, ResourcesSpec
from pooling_operator.api.problems import Problem
from pooling_operator.api.quantity import binary_quantity
from pooling_operator.api.resources import SHARE_KINDS
from pooling_operator.vllm.extra_args import ExtraArgs
from pooling_operator.vllm.gpu_tables import MIG_PROFILES, PRODUCTS, mig_family
from pooling_operator.vllm.memory import (
    FAR_ABOVE,
    device_memory,
    mig_slice,
    minimum,
    product_memory,
    share_bytes,
)
from pooling_operator.vllm.workload import Workload

P = "spec.resources.gpu"
# Flags that size vLLM's memory apart from --gpu-memory-utilization: with a share they would escape its bound
# (kv_cache_memory_bytes "does not respect the gpu_memory_utilization config", v1/worker/gpu_worker.py:649-676).
BOUND_FLAGS = ("--kv-cache-memory-bytes",)


def share_problems(w: Workload, xa: ExtraArgs, resources: ResourcesSpec | None) -> Iterator[Problem]:
    gpu = resources.gpu if resources else None
    if gpu is None or gpu.share is None:
        return
    assert resources is not None  # the gpu is its
    share = gpu.share
    if w.kind not in SHARE_KINDS:
        kinds = f"{', '.join(SHARE_KINDS[:-1])} and {SHARE_KINDS[-1]}"
        yield Problem(f"{P}.share", f"a GPU share applies to {kinds}; a {w.kind} takes whole GPUs (count)")
        return
    if gpu.count is not None:
        yield Problem(f"{P}.count", M.SHARE_NOT_COUNT)
    if gpu.resource_name is not None:
        yield Problem(f"{P}.resourceName", M.SHARE_NOT_RESOURCE_NAME)
    for ok, path, message in (
        (share.via != "mig" or share.mig_profile is not None, "migProfile", M.SHARE_MIG_PROFILE),
        (share.via != "dra" or share.device_class_name is not None, "deviceClassName", M.SHARE_DRA_CLASS),
        (share.via == "timeSlicing" or share.resource_name is None, "resourceName", M.SHARE_RESOURCE_NAME_TIME_SLICING),
        (share.via == "mig" or share.mig_profile is None, "migProfile", M.SHARE_MIG_PROFILE_ONLY),
        (share.via == "dra" or share.device_class_name is None, "deviceClassName", M.SHARE_DRA_CLASS_ONLY),
    ):
        if not ok:
            yield Problem(f"{P}.share.{path}", message)
    if w.engine.gpu_memory_utilization is not None:
        yield Problem(
            "spec.engine.gpuMemoryUtilization",
            "set by resources.gpu.share (share.memory over the device's memory): remove it, or the share",
        )
    if (w.engine.tensor_parallel_size or 1) > 1:
        yield Problem("spec.engine.tensorParallelSize", "a share is part of one GPU: tensorParallelSize must be 1 (or use count)")
    for flag in BOUND_FLAGS:
        if flag in xa.given:
            yield Problem("spec.engine.extraArgs", f"{flag} sizes vLLM's memory outside the share's bound: remove it with a share")
    yield from _device(gpu)
    yield from _fits(w, resources)


def _device(gpu: GpuSpec) -> Iterator[Problem]:
    share = gpu.share
    assert share is not None
    if share.via == "mig":
        family = mig_family(gpu.product)
        if family is None:
            known = sorted(p for p, row in PRODUCTS.items() if row.mig)
            yield Problem(f"{P}.product", f"a MIG share needs the product whose slice it is, one of {', '.join(known)}")
        elif mig_slice(gpu)[1] is None:
            profiles = sorted(MIG_PROFILES[family])
            yield Problem(f"{P}.share.migProfile", f"{share.mig_profile} is not a MIG profile of {gpu.product}; use one of {', '.join(profiles)}")
        elif mig_slice(gpu)[0] is None:
            yield Problem(f"{P}.memory", f"the {gpu.product} slice's memory needs the product's: set resources.gpu.memory "
                                         "as the node's nvidia.com/gpu.memory label gives it (MiB)")  # fmt: skip
        return
    if product_memory(gpu) is None:
        yield Problem(
            f"{P}.memory",
            f"the device's memory is unknown (the operator's table has none for {gpu.product or 'no product'}): set "
            "resources.gpu.memory as the node's nvidia.com/gpu.memory label gives it (e.g. 81559Mi for an H100 "
            "80GB HBM3), or a product the table knows: " + ", ".join(sorted(p for p, r in PRODUCTS.items() if r.mib)),
        )


def _fits(w: Workload, resources: ResourcesSpec) -> Iterator[Problem]:
    gpu = resources.gpu
    assert gpu is not None and gpu.share is not None
    share, device = share_bytes(gpu), device_memory(gpu)
    assert share is not None  # a share's memory
    path = f"{P}.share.memory"
    if device is not None and share > device:
        where = f"the {gpu.share.mig_profile} slice's" if gpu.share.via == "mig" else "the device's"
        yield Problem(path, f"share.memory {binary_quantity(share)} is more than {where} {binary_quantity(device)}")
        return
    need = minimum(w)
    if need.total > share:
        at_least = "at least " if need.missing else ""
        yield Problem(path, f"share.memory {binary_quantity(share)} is below the {at_least}{need.summary()} this server "
                            f"needs inside vLLM's bound; raise it to at least {binary_quantity(need.total)}")  # fmt: skip
    elif need.missing:
        hints = ", ".join(f"model.hints.{h}" for h in need.missing)
        yield Problem(path, f"cannot check the share against the model: set {hints} (so far {need.summary()})", "warning")
    elif share > FAR_ABOVE * need.total:
        yield Problem(
            path,
            f"share.memory {binary_quantity(share)} is over {FAR_ABOVE}x the {need.summary()} this server needs: the "
            "rest becomes KV cache no pooling request of maxModelLen needs; a smaller share leaves it to co-tenants",
            "warning",
        )
