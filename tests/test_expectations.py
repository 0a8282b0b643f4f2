"""Hand-written expectations: what the API and vLLM's contract say, typed in here from shared/API.md and
shared/reference/vllm-contract.md — not what the code printed. The golden files (tests/golden/) catch any
change; these say which changes are wrong."""

from __future__ import annotations

from typing import Any

import yaml

from pooling_operator.api.crd import all_crds
from pooling_operator.builders import BuildContext, build
from pooling_operator.status import conditions as c
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.validate import validate

MINILM = """
apiVersion: vllm-pooling.io/v1alpha1
kind: PoolingService
metadata: {name: minilm, namespace: search, uid: 11111111-2222-3333-4444-555555555555}
spec:
  model: {name: sentence-transformers/all-MiniLM-L6-v2, revision: c9745ed1d9f207416be6d2e6f8de32d1f16199bf}
  task: embed
  pooling: {type: MEAN, normalize: true}
  engine: {image: "vllm/vllm-openai:v0.32.0", maxModelLen: 256}
"""


def crd(plural: str) -> dict[str, Any]:
    return next(x for x in all_crds() if x["spec"]["names"]["plural"] == plural)


def test_pooling_service_crd_says_what_api_md_says() -> None:
    d = crd("poolingservices")
    assert d["spec"]["group"] == "vllm-pooling.io" and d["spec"]["scope"] == "Namespaced"
    assert d["spec"]["names"]["kind"] == "PoolingService"
    assert "pls" in d["spec"]["names"]["shortNames"] and "pooling" in d["spec"]["names"]["categories"]
    [v] = d["spec"]["versions"]
    assert v["name"] == "v1alpha1" and v["served"] and v["storage"]
    # status and scale subresources: `kubectl scale` and HPA/KEDA move spec.replicas
    assert v["subresources"]["status"] == {}
    assert v["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert v["subresources"]["scale"]["statusReplicasPath"] == ".status.replicas"
    spec = v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["task"]["enum"] == ["embed", "classify", "token_embed", "token_classify"]
    assert set(spec["pooling"]["properties"]["type"]["enum"]) >= {"CLS", "MEAN", "LAST", "ALL", "STEP"}
    # the printer columns read the condition names of status/conditions.py
    columns = {col["name"]: col["jsonPath"] for col in v["additionalPrinterColumns"]}
    assert columns["Ready"] == f'.status.conditions[?(@.type=="{c.READY}")].status'
    assert columns["Reason"] == f'.status.conditions[?(@.type=="{c.READY}")].reason'
    assert columns["Scaling"] == f'.status.conditions[?(@.type=="{c.SCALING_LIMITED}")].reason'


def test_minilm_deployment_is_what_the_vllm_contract_asks_for() -> None:
    result = validate(yaml.safe_load(MINILM))
    assert result.resource is not None and not result.errors, result.problems
    objects = {o["kind"]: o for o in build(result.resource, contract("0.32"), BuildContext())}  # type: ignore[arg-type]
    assert set(objects) == {"Deployment", "Service", "PodDisruptionBudget"}
    dep = objects["Deployment"]
    assert dep["metadata"]["ownerReferences"][0]["uid"] == "11111111-2222-3333-4444-555555555555"
    [container] = dep["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["vllm", "serve"]
    assert container["args"] == [
        "sentence-transformers/all-MiniLM-L6-v2",
        "--served-model-name", "minilm",
        "--host", "0.0.0.0", "--port", "8000",
        "--revision", "c9745ed1d9f207416be6d2e6f8de32d1f16199bf",
        "--runner", "pooling",
        # one pooling task, always through --pooler-config; normalize is vLLM's use_activation
        "--pooler-config", '{"seq_pooling_type":"MEAN","task":"embed","use_activation":true}',
        "--max-model-len", "256",
        "--custom-histogram-buckets",
        '{"request_latency":[0.005,0.01,0.02,0.03,0.05,0.075,0.1,0.15,0.2,0.25,0.3,0.4,0.5,0.75,'
        "1.0,1.5,2.0,3.0,5.0,7.5,10.0,20.0,30.0,60.0,120.0,300.0,600.0]}",
    ]  # fmt: skip
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"  # default: one GPU
    # a GPU rollout never needs a spare GPU
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    svc = objects["Service"]
    assert svc["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]


def test_typed_pod_fields_refuse_typos_with_the_path() -> None:
    from tests.factories import pooling

    typo = validate(pooling({"template": {"tolerations": [{"key": "gpu", "operater": "Exists"}]}}))
    assert any(p.path.startswith("spec.template.tolerations[0]") and "operater" in p.path + p.message for p in typo.errors), typo.problems
    effect = validate(pooling({"template": {"tolerations": [{"key": "gpu", "effect": "NoSchedul"}]}}))
    assert any(p.path == "spec.template.tolerations[0].effect" for p in effect.errors), effect.problems
    affinity = validate(pooling({"template": {"affinity": {"nodeAfinity": {}}}}))
    assert any("nodeAfinity" in p.path + p.message for p in affinity.errors), affinity.problems
    ok = validate(pooling({"template": {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
                                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}}}}))  # fmt: skip
    assert not ok.errors, ok.problems
