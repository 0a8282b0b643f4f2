"""That a shared server's pod resources and its rendered vLLM bound agree: 1,000 generated shares (products of
the table and unknown ones, every placement, MIG profiles of the product and of others, shares from 64Mi to
200Gi, encoder and decoder models). For every accepted one: the pod asks for exactly the resource its
placement names (or a DRA claim), ``--gpu-memory-utilization`` is the share over the device rounded down (vLLM's
ceil(total x it) never above the share), the share holds the model's minimum and fits its device, and the pod
counts as the fraction it is. Every refused one names a field under spec.resources or spec.engine."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooling_operator.api.gpu import ResourcesSpec
from pooling_operator.api.quantity import parse_quantity
from pooling_operator.builders import BuildContext, plan
from pooling_operator.builders.common import TIME_SLICED_RESOURCE
from pooling_operator.vllm import memory
from pooling_operator.vllm.gpu_tables import MIG_PROFILES, PRODUCTS
from pooling_operator.vllm.memory import gpus_held
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate
from tests.factories import pooling
from tests.properties_support import PROPERTY_SETTINGS

ENCODER = {"architectures": ["BertModel"], "numHiddenLayers": 6, "hiddenSize": 384, "numAttentionHeads": 12, "maxModelLen": 512}
DECODER = {"architectures": ["Qwen3ForCausalLM"], "numHiddenLayers": 28, "hiddenSize": 1024, "numAttentionHeads": 16,
           "numKeyValueHeads": 8, "headDim": 128, "maxModelLen": 32768}  # fmt: skip
MiB = 2**20
EVERY_PROFILE = sorted({p for family in MIG_PROFILES.values() for p in family})


@st.composite
def shared_services(draw: st.DrawFn) -> dict[str, Any]:
    known = sorted(PRODUCTS)
    product = draw(st.one_of(st.sampled_from(known), st.sampled_from(["NVIDIA-Z9", None])) if draw(st.integers(0, 4)) == 0
                   else st.sampled_from(known))  # fmt: skip
    via = draw(st.sampled_from(["timeSlicing", "mig", "dra"]))
    family = MIG_PROFILES.get(PRODUCTS[product].mig or "") if product in PRODUCTS else None
    share: dict[str, Any] = {"via": via}
    if via == "mig":
        own = sorted(family) if family and draw(st.integers(0, 4)) else EVERY_PROFILE
        share["migProfile"] = draw(st.sampled_from(own))
    if via == "dra":
        share["deviceClassName"] = "gpu.nvidia.com"
    if via == "timeSlicing" and draw(st.booleans()):
        share["resourceName"] = "nvidia.com/gpu-small"
    share["memory"] = "1Gi"  # drawn below, once the model's minimum and the device are known
    gpu: dict[str, Any] = {"share": share}
    if product:
        gpu["product"] = product
    if draw(st.integers(0, 3)) == 0:
        gpu["memory"] = f"{draw(st.integers(8 * 1024, 200 * 1024))}Mi"
    hints = dict(draw(st.sampled_from([ENCODER, DECODER])))
    hints["numParameters"] = draw(st.sampled_from([22_713_216, 109_482_240, 335_141_888, 596_049_920, 1_543_714_304, 7_615_616_512]))
    lengths = [n for n in (256, 512, 4096, 32768) if n <= hints["maxModelLen"]]
    engine = {"maxModelLen": draw(st.sampled_from(lengths)), "dtype": draw(st.sampled_from(["auto", "float32", "bfloat16"]))}
    doc = pooling({"model": {"hints": hints}, "engine": engine, "resources": {"gpu": gpu}})
    # mostly between the minimum and the device (what a user means), sometimes anywhere (what a user mistypes)
    w = validate(doc, Settings()).workload
    spec = ResourcesSpec.model_validate(doc["spec"]["resources"]).gpu
    low = memory.minimum(w).total // MiB + 1 if w else 64
    high = (memory.device_memory(spec) or 0) // MiB if spec else 0
    anywhere = st.integers(64, 160 * 1024)
    drawn = draw(st.integers(low, high) if low < high and draw(st.integers(0, 4)) else anywhere)
    doc["spec"]["resources"]["gpu"]["share"]["memory"] = f"{drawn}Mi"
    return doc


@pytest.mark.thorough
@settings(PROPERTY_SETTINGS, max_examples=1000)
@given(shared_services())
def test_a_shared_pod_asks_for_what_its_bound_allows(doc: dict[str, Any]) -> None:
    result = validate(doc, Settings())
    if not result.ok:
        assert result.errors
        assert all(p.path.startswith(("spec.resources.gpu", "spec.engine")) for p in result.errors), result.errors
        return
    assert result.resource is not None and result.contract is not None
    gpu = ResourcesSpec.model_validate(doc["spec"]["resources"]).gpu
    assert gpu is not None and gpu.share is not None
    p = plan(result.resource, result.contract, BuildContext(), result.workload)
    [dep] = [o for o in p.objects if o["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    res = pod["containers"][0]["resources"]
    gpu_limits = {k: v for k, v in res.get("limits", {}).items() if k not in ("cpu", "memory")}
    share = gpu.share
    want = {"timeSlicing": {share.resource_name or TIME_SLICED_RESOURCE: "1"}, "mig": {f"nvidia.com/mig-{share.mig_profile}": "1"},
            "dra": {}}[share.via]  # fmt: skip
    assert gpu_limits == want and res.get("requests", {}).keys() >= want.keys()
    assert ("claims" in res) is (share.via == "dra") is ("resourceClaims" in pod)

    util = float(p.argv[p.argv.index("--gpu-memory-utilization") + 1])
    device, share_bytes = memory.device_memory(gpu), int(parse_quantity(share.memory))
    assert device is not None and 0 < util <= 1
    assert math.ceil(device * util) <= share_bytes <= device  # vLLM's request never above the share
    assert share_bytes - device * util <= device * 1e-4 + 1  # and short of it by at most the rounding
    assert memory.minimum(result.workload).total <= share_bytes  # type: ignore[arg-type]
    held = gpus_held(ResourcesSpec.model_validate(doc["spec"]["resources"]))
    assert 0 < held <= 1
    if share.via != "mig":
        assert math.isclose(held, share_bytes / memory.product_memory(gpu))  # type: ignore[operator]
