"""A share of one GPU (resources.gpu.share): the rules, the sizing (vllm/memory.py), what is rendered, and the
GPUs a pod counts as; one row per case."""

from __future__ import annotations

import math
from typing import Any

import pytest

from pooling_operator.api.gpu import ResourcesSpec
from pooling_operator.api.services import GpuShareStatus
from pooling_operator.builders import BuildContext, plan
from pooling_operator.vllm import memory
from pooling_operator.vllm.gpu_tables import MIG_PROFILES, PRODUCTS
from pooling_operator.vllm.memory import gpus_held
from pooling_operator.vllm.settings import Settings
from pooling_operator.vllm.validate import validate
from pooling_operator.vllm.workload import workload
from tests.factories import hidden_states, pooling, pooling_job, scoring

MiB, GiB = 2**20, 2**30
H100 = "NVIDIA-H100-80GB-HBM3"
MINILM = {"architectures": ["BertModel"], "numHiddenLayers": 6, "hiddenSize": 384, "numAttentionHeads": 12,
          "maxModelLen": 512, "numParameters": 22713216}  # fmt: skip
QWEN3_06B = {"architectures": ["Qwen3ForCausalLM"], "numHiddenLayers": 28, "hiddenSize": 1024, "numAttentionHeads": 16,
             "numKeyValueHeads": 8, "headDim": 128, "maxModelLen": 32768, "numParameters": 596049920}  # fmt: skip


def shared(gpu: dict[str, Any] | None = None, hints: dict[str, Any] | None = None, engine: dict[str, Any] | None = None) -> dict[str, Any]:
    return pooling({
        "model": {"hints": hints or MINILM},
        "engine": {"maxModelLen": 512, **(engine or {})},
        "resources": {"gpu": gpu if gpu is not None else {"product": H100, "share": {"memory": "2Gi", "via": "timeSlicing"}}},
    })  # fmt: skip


def problems(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    r = validate(doc, Settings())
    return [(p.path, p.severity, p.message) for p in r.problems if "revision" not in p.path]


def mig(profile: str, memory_: str = "4Gi", product: str = H100) -> dict[str, Any]:
    return {"product": product, "share": {"memory": memory_, "via": "mig", "migProfile": profile}}


REFUSED = [
    # (id, doc, path, words in the message)
    ("a share with count", shared({"count": 1, "product": H100, "share": {"memory": "2Gi", "via": "timeSlicing"}}),
     "spec.resources.gpu.count", "remove resources.gpu.count"),
    ("a share with count 0 too", shared({"count": 0, "product": H100, "share": {"memory": "2Gi", "via": "timeSlicing"}}),
     "spec.resources.gpu.count", "share replaces whole GPUs"),
    ("a share with resourceName", shared({"resourceName": "nvidia.com/gpu", "product": H100, "share": {"memory": "2Gi", "via": "timeSlicing"}}),
     "spec.resources.gpu.resourceName", "share.resourceName"),
    ("gpuMemoryUtilization with a share", shared(engine={"gpuMemoryUtilization": 0.5}),
     "spec.engine.gpuMemoryUtilization", "set by resources.gpu.share"),
    ("tensor parallelism with a share", shared(engine={"tensorParallelSize": 2}),
     "spec.engine.tensorParallelSize", "must be 1"),
    ("kv-cache-memory-bytes escapes the bound", shared(engine={"extraArgs": ["--kv-cache-memory-bytes", "1000000000"]}),
     "spec.engine.extraArgs", "outside the share's bound"),
    ("mig without a profile", shared({"product": H100, "share": {"memory": "4Gi", "via": "mig"}}),
     "spec.resources.gpu.share.migProfile", "needs share.migProfile"),
    ("dra without a device class", shared({"product": H100, "share": {"memory": "4Gi", "via": "dra"}}),
     "spec.resources.gpu.share.deviceClassName", "needs share.deviceClassName"),
    ("a profile with time-slicing", shared({"product": H100, "share": {"memory": "4Gi", "via": "timeSlicing", "migProfile": "1g.10gb"}}),
     "spec.resources.gpu.share.migProfile", "only to via mig"),
    ("a resource name with mig", shared({"product": H100, "share": {"memory": "4Gi", "via": "mig", "migProfile": "1g.10gb", "resourceName": "x/y"}}),
     "spec.resources.gpu.share.resourceName", "only to via timeSlicing"),
    ("an unknown product, no memory", shared({"product": "NVIDIA-Z9", "share": {"memory": "2Gi", "via": "timeSlicing"}}),
     "spec.resources.gpu.memory", "nvidia.com/gpu.memory"),
    ("no product at all", shared({"share": {"memory": "2Gi", "via": "dra", "deviceClassName": "gpu.nvidia.com"}}),
     "spec.resources.gpu.memory", "no product"),
    ("mig on a product without mig", shared(mig("1g.10gb", product="NVIDIA-L4")),
     "spec.resources.gpu.product", "a MIG share needs the product"),
    ("a profile the product lacks", shared(mig("1g.18gb")),
     "spec.resources.gpu.share.migProfile", "not a MIG profile of NVIDIA-H100-80GB-HBM3"),
    ("a share larger than the device", shared({"product": "Tesla-T4", "share": {"memory": "16Gi", "via": "timeSlicing"}}),
     "spec.resources.gpu.share.memory", "more than the device's 15Gi"),
    ("a share larger than its MIG slice", shared(mig("1g.10gb", "12Gi")),
     "spec.resources.gpu.share.memory", "more than the 1g.10gb slice's"),
    ("a share below the model's minimum", shared({"product": H100, "share": {"memory": "512Mi", "via": "timeSlicing"}}),
     "spec.resources.gpu.share.memory", "raise it to at least 559.8Mi"),
    ("a decoder's KV cache counts", shared({"product": H100, "share": {"memory": "2Gi", "via": "timeSlicing"}}, QWEN3_06B,
     {"maxModelLen": 32768, "maxNumBatchedTokens": 8192, "dtype": "bfloat16"}),
     "spec.resources.gpu.share.memory", "kvCache 3.5Gi"),
    ("a HiddenStateJob takes whole GPUs", {**hidden_states(), "spec": {**hidden_states()["spec"],
     "resources": {"gpu": {"product": H100, "share": {"memory": "8Gi", "via": "timeSlicing"}}}}},
     "spec.resources.gpu.share", "takes whole GPUs"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "path", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_refused_naming_the_field(doc: dict[str, Any], path: str, words: str) -> None:
    found = [(p, m) for p, sev, m in problems(doc) if sev == "error"]
    assert any(p == path and words in m for p, m in found), found


WARNED = [
    ("far above the minimum", shared({"product": H100, "share": {"memory": "8Gi", "via": "timeSlicing"}}), "over 4x"),
    ("no numParameters", shared(hints={k: v for k, v in MINILM.items() if k != "numParameters"}), "set model.hints.numParameters"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "words"), [c[1:] for c in WARNED], ids=[c[0] for c in WARNED])
def test_warned_not_refused(doc: dict[str, Any], words: str) -> None:
    got = problems(doc)
    assert not [g for g in got if g[1] == "error"], got
    assert any(p == "spec.resources.gpu.share.memory" and sev == "warning" and words in m for p, sev, m in got), got


def test_whole_gpus_stay_the_default_and_unchanged() -> None:
    doc = pooling({"resources": {"gpu": {"count": 1, "product": H100}}})
    p = rendered(doc)
    assert p["resources"]["limits"] == {"nvidia.com/gpu": "1"} and "--gpu-memory-utilization" not in p["args"]
    assert gpus_held(ResourcesSpec.model_validate({"gpu": {"count": 2}})) == 2.0
    assert gpus_held(None) == 1.0


def rendered(doc: dict[str, Any]) -> dict[str, Any]:
    r = validate(doc, Settings())
    assert r.ok, r.problems
    pl = plan(r.resource, r.contract, BuildContext(), r.workload)  # type: ignore[arg-type]
    [dep] = [o for o in pl.objects if o["kind"] == "Deployment"]
    pod = dep["spec"]["template"]["spec"]
    c = pod["containers"][0]
    return {"resources": c["resources"], "args": c["args"], "pod": pod, "objects": pl.objects, "argv": pl.argv}


RENDERED = [
    # (id, gpu, the container's limits, utilization, GPUs counted)
    ("time-slicing, default resource", {"product": H100, "share": {"memory": "2Gi", "via": "timeSlicing"}},
     {"nvidia.com/gpu.shared": "1"}, 0.0251, 2 * GiB / (81559 * MiB)),
    ("time-slicing, the plugin's own name", {"product": H100, "share": {"memory": "2Gi", "via": "timeSlicing", "resourceName": "nvidia.com/gpu-small"}},
     {"nvidia.com/gpu-small": "1"}, 0.0251, 2 * GiB / (81559 * MiB)),
    ("memory given for an unknown product", {"product": "NVIDIA-Z9", "memory": "20000Mi", "share": {"memory": "2Gi", "via": "timeSlicing"}},
     {"nvidia.com/gpu.shared": "1"}, 0.1024, 2048 / 20000),
    ("mig, the slice from its fraction", mig("1g.10gb", "4Gi"), {"nvidia.com/mig-1g.10gb": "1"}, 0.4017, 1 / 8),
    ("mig, the slice nvidia-smi lists", mig("1g.18gb", "8Gi", "NVIDIA-H200"), {"nvidia.com/mig-1g.18gb": "1"}, 0.5, 1 / 8),
    ("dra, a claim not a resource", {"product": H100, "share": {"memory": "2Gi", "via": "dra", "deviceClassName": "gpu.nvidia.com"}},
     {}, 0.0251, 2 * GiB / (81559 * MiB)),
]  # fmt: skip


@pytest.mark.parametrize(("gpu", "limits", "util", "gpus"), [c[1:] for c in RENDERED], ids=[c[0] for c in RENDERED])
def test_rendered(gpu: dict[str, Any], limits: dict[str, str], util: float, gpus: float) -> None:
    out = rendered(shared(gpu))
    assert {k: v for k, v in out["resources"].get("limits", {}).items() if k != "memory"} == limits
    args = out["args"]
    assert float(args[args.index("--gpu-memory-utilization") + 1]) == util
    assert gpus_held(ResourcesSpec.model_validate({"gpu": gpu})) == pytest.approx(gpus)
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in out["pod"]["tolerations"]
    dra = gpu["share"]["via"] == "dra"
    assert ("resourceClaims" in out["pod"]) is dra and ("claims" in out["resources"]) is dra
    if dra:
        [tmpl] = [o for o in out["objects"] if o["kind"] == "ResourceClaimTemplate"]
        assert out["objects"][0] is tmpl  # applied before the Deployment whose pods name it
        assert out["pod"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": tmpl["metadata"]["name"]}]
        assert tmpl["spec"]["spec"]["devices"]["requests"] == [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "2Gi"}}}}
        ]  # part of one device: consumable capacity (KEP-5075)


def dra(memory: str) -> dict[str, Any]:
    return {"product": H100, "share": {"memory": memory, "via": "dra", "deviceClassName": "gpu.nvidia.com"}}


def test_a_changed_dra_share_is_a_new_claim_template() -> None:
    # a ResourceClaimTemplate's spec is immutable: an apply changing it would be refused (422) for good
    names = {}
    for memory_ in ("2Gi", "2Gi", "3Gi"):
        out = rendered(shared(dra(memory_)))
        [tmpl] = [o for o in out["objects"] if o["kind"] == "ResourceClaimTemplate"]
        assert out["pod"]["resourceClaims"][0]["resourceClaimTemplateName"] == tmpl["metadata"]["name"]
        names.setdefault(memory_, set()).add(tmpl["metadata"]["name"])
    assert len(names["2Gi"]) == 1 and names["2Gi"] != names["3Gi"]
    assert all(n.startswith("demo-gpu-") and len(n) == len("demo-gpu-") + 8 for ns in names.values() for n in ns)


CLAIM_TEMPLATES = [
    # (id, the observed template, dropped)
    ("capacity kept (the gate on)", {"spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 1, "capacity": {"requests": {"memory": "2Gi"}}}}]}}}},
     False),
    ("capacity dropped (the gate off, as 1.35 answers)", {"spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}}}}, True),
    ("not seen yet", None, False),
    ("no requests at all", {"spec": {"spec": {"devices": {}}}}, False),
]  # fmt: skip


@pytest.mark.parametrize(("template", "dropped"), [c[1:] for c in CLAIM_TEMPLATES], ids=[c[0] for c in CLAIM_TEMPLATES])
def test_status_says_when_a_dra_share_became_a_whole_device(template: dict[str, Any] | None, dropped: bool) -> None:
    from pooling_operator.status.services import WHOLE_DEVICE, claim_capacity_dropped, share_status

    assert claim_capacity_dropped(template) is dropped
    r = validate(shared(dra("2Gi")), Settings())
    st = share_status(r.resource, r.workload, template)  # type: ignore[arg-type]
    assert st is not None
    assert st["gpus"] == (1.0 if dropped else round(2 * GiB / (81559 * MiB), 4))
    assert st.get("allocation") == (WHOLE_DEVICE if dropped else None)
    declared = {f.alias or n for n, f in GpuShareStatus.model_fields.items()}
    assert set(st) <= declared, set(st) - declared  # the API server refuses a status patch with an undeclared field


def test_scoring_services_share_too_and_status_says_what_the_share_is() -> None:
    from pooling_operator.status.services import share_status

    doc = scoring({"model": {"hints": {**MINILM, "architectures": ["BertForSequenceClassification"], "numLabels": 1}},
                   "engine": {"maxModelLen": 512}, "resources": {"gpu": {"product": H100, "share": {"memory": "2Gi", "via": "timeSlicing"}}}})  # fmt: skip
    r = validate(doc, Settings())
    assert r.ok, r.problems
    st = share_status(r.resource, r.workload)  # type: ignore[arg-type]
    assert st is not None
    assert (st["memory"], st["minimum"], st["gpuMemoryUtilization"]) == ("2Gi", "559.8Mi", 0.0251)
    assert st["isolation"].startswith("none: time-slicing")


def test_the_utilization_never_lets_vllm_request_more_than_the_share() -> None:
    # vLLM requests ceil(total x utilization) (v1/worker/utils.py:723-725); total <= NVML's figure in the table
    for label, row in PRODUCTS.items():
        if not row.mib:
            continue
        for share_mib in (600, 1000, 1537, 4096, 10_000, row.mib):
            spec = ResourcesSpec.model_validate({"gpu": {"product": label, "share": {"memory": f"{share_mib}Mi", "via": "timeSlicing"}}})
            util = memory.utilization(spec.gpu)  # type: ignore[arg-type]
            assert util is not None
            assert math.ceil(row.mib * MiB * util) <= share_mib * MiB, (label, share_mib, util)
            assert share_mib * MiB - row.mib * MiB * util < row.mib * MiB * 1e-4 + 1  # and wastes under 0.01%


def test_the_sizing_terms() -> None:
    w = workload(validate(shared(hints=QWEN3_06B, engine={"maxModelLen": 8192, "maxNumBatchedTokens": 8192, "dtype": "bfloat16"}), Settings()).resource)  # type: ignore[arg-type]
    terms = {t.name: t.bytes for t in memory.minimum(w).terms}
    assert terms["weights"] == 596049920 * 2
    assert terms["activations"] == 8192 * 1024 * memory.ACTIVATION_WIDTHS * 2
    assert terms["kvCache"] == 28 * 2 * 8 * 128 * 2 * (8192 // 16 + 1) * 16  # K and V, 513 blocks of 16
    assert terms["reserve"] == memory.RESERVE_BYTES
    enc = workload(validate(shared(), Settings()).resource)  # type: ignore[arg-type]
    assert {t.name: t.bytes for t in memory.minimum(enc).terms}["kvCache"] == 0  # BertModel: encoder-only


def test_every_table_row_names_a_source() -> None:
    assert all(row.source for row in PRODUCTS.values())
    for family, profiles in MIG_PROFILES.items():
        assert {p.eighths for p in profiles.values()} <= {1, 2, 4, 8}, family
        assert all(p.source for p in profiles.values())
        assert max(p.eighths for p in profiles.values()) == 8


def test_the_budget_the_autoscaler_and_simulate_count_a_share_as_its_fraction() -> None:
    from pooling_operator.autoscaling.loop import owner_gpus
    from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams
    from pooling_operator.autoscaling.simulator.simulate import setup_for

    ts = {"product": H100, "share": {"memory": "4Gi", "via": "timeSlicing"}}
    owner = {"metadata": {"name": "a"}, "spec": {"resources": {"gpu": ts}}}
    assert owner_gpus(owner) == pytest.approx(4 * 1024 / 81559)  # the namespace budget's count
    assert owner_gpus({"metadata": {"name": "a"}, "spec": {"resources": {"gpu": mig("1g.10gb")}}}) == 1 / 8
    doc = shared(ts)
    doc["spec"]["autoscaling"] = {"minReplicas": 1, "maxReplicas": 4, "p99Latency": "250ms"}
    r = validate(doc, Settings())
    assert r.ok, r.problems
    assert setup_for(r.resource, None, ServiceParams()).gpus_per_replica == pytest.approx(4 * 1024 / 81559)


def as_pooling_job(doc: dict[str, Any]) -> dict[str, Any]:
    """The same model, engine and resources as a PoolingJob (issue 42.6: a corpus job on part of a GPU)."""
    spec = doc["spec"]
    return pooling_job({"model": {"hints": spec["model"]["hints"]}, "engine": {k: v for k, v in spec["engine"].items() if k != "image"},
                        "resources": spec["resources"], "pooling": {"type": "MEAN", "normalize": True}})


@pytest.mark.parametrize(("doc", "path", "words"), [c[1:] for c in REFUSED if "HiddenStateJob" not in c[0]],
                         ids=[c[0] for c in REFUSED if "HiddenStateJob" not in c[0]])
def test_a_pooling_job_on_a_share_is_refused_with_the_same_figures(doc: dict[str, Any], path: str, words: str) -> None:
    found = [(p, m) for p, sev, m in problems(as_pooling_job(doc)) if sev == "error"]
    assert any(p == path and words in m for p, m in found), found


@pytest.mark.parametrize(("gpu", "limits", "util", "gpus"), [c[1:] for c in RENDERED], ids=[c[0] for c in RENDERED])
def test_a_pooling_job_on_a_share_is_sized_and_requests_it_as_a_service(gpu: dict[str, Any], limits: dict[str, str], util: float,
                                                                        gpus: float) -> None:
    r = validate(as_pooling_job(shared(gpu)), Settings())
    assert r.ok, r.problems
    pl = plan(r.resource, r.contract, BuildContext(), r.workload)  # type: ignore[arg-type]
    [job] = [o for o in pl.objects if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    [vllm] = [c for c in pod["initContainers"] if c["name"] == "vllm"]
    # the share's resource is what the Job's pod requests: Kueue's quota counts it so
    assert {k: v for k, v in vllm["resources"].get("limits", {}).items() if k != "memory"} == limits
    assert float(vllm["args"][vllm["args"].index("--gpu-memory-utilization") + 1]) == util
    assert gpus_held(r.resource.spec.resources) == pytest.approx(gpus)  # type: ignore[union-attr]
    dra_share = gpu["share"]["via"] == "dra"
    assert ("resourceClaims" in pod) is dra_share and ("claims" in vllm["resources"]) is dra_share
    if dra_share:
        assert pl.objects[0]["kind"] == "ResourceClaimTemplate"
        assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": pl.objects[0]["metadata"]["name"]}]
