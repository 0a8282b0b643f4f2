"""Builders: golden renders of every example, determinism, and the GPU/Kubernetes plumbing they promise."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from pooling_operator.builders import BuildContext, build
from pooling_operator.cli import main
from pooling_operator.vllm.contract import contract
from pooling_operator.vllm.metrics import LATENCY_BUCKETS, SCOPE_LABELS, queries
from pooling_operator.vllm.validate import validate
from tests.factories import generative, hidden_states, pooling

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
GOLDEN = Path(__file__).parent / "golden" / "render"


def render(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["render", *args]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_golden_render(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Policies are resolved from the same input, as `render examples/` does (once: the same object twice in
    # one input is refused).
    policy = ROOT / "examples" / "autoscaling-policy.yaml"
    out = render(capsys, *dict.fromkeys([str(example), str(policy)]))
    golden = GOLDEN / example.name
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(parents=True, exist_ok=True)
        golden.write_text(out)
    assert out == golden.read_text(), f"render of {example.name} changed: review it, then UPDATE_GOLDEN=1"


def test_render_is_deterministic(capsys: pytest.CaptureFixture[str]) -> None:
    first = render(capsys, str(ROOT / "examples"))
    second = render(capsys, str(ROOT / "examples"))
    assert first == second and first.count("\n---") + first.startswith("---") >= 20
    args_first = render(capsys, "--vllm-args", str(ROOT / "examples"))
    assert args_first == render(capsys, "--vllm-args", str(ROOT / "examples"))


def test_vllm_args_lines(capsys: pytest.CaptureFixture[str]) -> None:
    lines = render(capsys, "--vllm-args", str(ROOT / "examples" / "minilm-embeddings.yaml")).splitlines()
    assert lines[0] == "PoolingService/search/minilm:"
    argv = shlex.split(lines[1])
    assert argv[:3] == ["vllm", "serve", "sentence-transformers/all-MiniLM-L6-v2"]
    assert argv[argv.index("--served-model-name") + 1] == "minilm"
    assert argv[argv.index("--pooler-config") + 1] == '{"seq_pooling_type":"MEAN","task":"embed","use_activation":true}'


def objects(obj: dict[str, Any], ctx: BuildContext | None = None) -> dict[str, dict[str, Any]]:
    result = validate(obj)
    assert result.ok, [str(p) for p in result.errors]
    built = build(result.resource, contract("0.33"), ctx or BuildContext())  # type: ignore[arg-type]
    return {o["kind"]: o for o in built}


def vllm_container(workload: dict[str, Any]) -> dict[str, Any]:
    pod = workload["spec"]["template"]["spec"]
    return next(c for c in [*pod.get("initContainers", []), *pod["containers"]] if c["name"] == "vllm")


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_deployment_gpu_plumbing() -> None:
    obj = pooling({"resources": {"gpu": {"count": 2, "product": "NVIDIA-H100-80GB-HBM3"}, "memory": "64Gi"},
                   "template": {"labels": {"team": "search", "app.kubernetes.io/instance": "spoof"}}})
    out = objects(obj)
    deploy = out["Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    c = vllm_container(deploy)
    assert deploy["spec"]["replicas"] == 1
    assert deploy["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert deploy["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/instance": "demo", "app.kubernetes.io/component": "pooling-service"}
    labels = deploy["spec"]["template"]["metadata"]["labels"]
    assert labels["team"] == "search" and labels["app.kubernetes.io/instance"] == "demo"
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2" and c["resources"]["limits"]["memory"] == "64Gi"
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["enableServiceLinks"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2Gi"}} in pod["volumes"]
    assert c["startupProbe"]["httpGet"]["path"] == "/health"
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 1800
    env = env_of(c)
    assert env["VLLM_NO_USAGE_STATS"] == "1" and env["VLLM_ENGINE_READY_TIMEOUT_S"] == "1800"
    assert "HF_HUB_OFFLINE" not in env
    assert out["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1
    assert out["Service"]["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
    for o in out.values():
        assert o["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "vllm-pooling-operator"
        assert "ownerReferences" not in o["metadata"]  # offline: no live owner


def test_latency_buckets_are_fixed_and_fine_whatever_the_target() -> None:
    templates = []
    for p99 in ("50ms", "250ms", "2s", None):
        autoscaling = {"maxReplicas": 4, **({"p99Latency": p99} if p99 else {})}
        out = objects(pooling({"autoscaling": autoscaling}))
        assert "replicas" not in out["Deployment"]["spec"]
        assert "ScaledObject" not in out  # backend operator
        args = vllm_container(out["Deployment"])["args"]
        assert yaml.safe_load(args[args.index("--custom-histogram-buckets") + 1]) == {"request_latency": list(LATENCY_BUCKETS)}
        templates.append(out["Deployment"]["spec"]["template"])
    # Changing the p99 target (or dropping it) never changes the pod template, so it never rolls pods.
    assert all(t == templates[0] for t in templates)
    plain = vllm_container(objects(pooling())["Deployment"])["args"]
    assert "--custom-histogram-buckets" in plain  # every service, autoscaled or not
    assert LATENCY_BUCKETS[0] <= 0.005 and LATENCY_BUCKETS[-1] >= 600  # from a few ms to minutes


def test_scale_down_drains_requests_in_flight() -> None:
    deploy = objects(pooling({"autoscaling": {"maxReplicas": 4}}))["Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    container = vllm_container(deploy)
    pause = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    readiness = container["readinessProbe"]
    # The pause outlasts a readiness period, so endpoints drop the pod while it still answers; the grace
    # period covers the pause and the longest request the latency buckets still resolve finely (2 min).
    assert pause > readiness["periodSeconds"]
    assert pod["terminationGracePeriodSeconds"] >= pause + 120


def test_secrets_come_from_secrets_and_offline_volume_models() -> None:
    obj = pooling({
        "model": {"revision": None, "source": {"volume": {"claimName": "models", "path": "/minilm"}}},
        "service": {"apiKeySecretRef": {"name": "key", "key": "k"}},
        "engine": {"env": [{"name": "HF_HOME", "value": "/cache/elsewhere"}]},
    })
    c = vllm_container(objects(obj)["Deployment"])
    env = env_of(c)
    assert env["VLLM_API_KEY"] == {"secretKeyRef": {"name": "key", "key": "k"}}
    assert env["HF_HUB_OFFLINE"] == "1" and env["HF_HOME"] == "/cache/elsewhere"
    assert c["args"][0] == "/models/minilm"
    assert not any("key" == a or "--api-key" in a for a in c["args"])
    hf = vllm_container(objects(pooling({"model": {"source": {"huggingFace": {"tokenSecretRef": {"name": "hf", "key": "t"}}}}}))["Deployment"])
    assert env_of(hf)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "t"}}


def test_monitors_and_keda() -> None:
    obj = pooling({"monitoring": {"serviceMonitor": True, "podMonitor": True},
                   "autoscaling": {"maxReplicas": 20, "backend": "keda", "queueDepthPerReplica": 8}})
    from pooling_operator.api.policy import AutoscalingPolicySpec

    policy = AutoscalingPolicySpec.model_validate({"limits": {"maxReplicas": 6, "minScaleDownStabilizationSeconds": 600}})
    out = objects(obj, BuildContext(policy=policy))
    endpoint = out["ServiceMonitor"]["spec"]["endpoints"][0]
    assert endpoint["port"] == "http"
    pod_endpoint = out["PodMonitor"]["spec"]["podMetricsEndpoints"][0]
    assert pod_endpoint["path"] == "/metrics"
    # Both monitors produce exactly the scope labels the autoscaler's queries match on.
    for relabelings in (endpoint["relabelings"], pod_endpoint["relabelings"]):
        assert {r["targetLabel"]: r["sourceLabels"][0] for r in relabelings} == SCOPE_LABELS
    so = out["ScaledObject"]["spec"]
    assert so["maxReplicaCount"] == 6  # capped by the policy
    behavior = so["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600  # the policy's floor
    # maxStep unset: four or doubling per 15 s, whichever is more (the HPA's own default, and our decision's)
    assert behavior["scaleUp"] == {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]}
    stepped = objects(pooling({"autoscaling": {"maxReplicas": 8, "backend": "keda", "scaleUp": {"maxStep": 2}}}))
    up = stepped["ScaledObject"]["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
    assert up == {"stabilizationWindowSeconds": 0, "policies": [{"type": "Pods", "value": 2, "periodSeconds": 15}]}
    q = queries("ns", "demo", "pooling-service", "60s")
    queue = so["triggers"][0]
    assert (queue["name"], queue["metricType"], queue["metadata"]["threshold"]) == ("waiting", "AverageValue", "8")
    assert queue["metadata"]["query"] == q.waiting
    with_p99 = objects(pooling({"autoscaling": {"maxReplicas": 2, "backend": "keda", "p99Latency": "250ms"}}))
    p99 = with_p99["ScaledObject"]["spec"]["triggers"][1]
    assert (p99["name"], p99["metricType"], p99["metadata"]["threshold"], p99["metadata"]["query"]) == ("p99", "Value", "0.25", q.p99)


def test_generative_raises_max_logprobs_only_when_needed() -> None:
    few = vllm_container(objects(generative())["Deployment"])["args"]
    assert "--max-logprobs" not in few and few[few.index("--runner") + 1] == "generate"
    many = generative({"generative": {"labels": [{"token": str(i), "id": i} for i in range(25)]}})
    args = vllm_container(objects(many)["Deployment"])["args"]
    assert args[args.index("--max-logprobs") + 1] == "25"


def test_hidden_state_job_shape() -> None:
    obj = hidden_states({"output": {"storageBudget": "1Ti"}, "parallelism": 2, "backoffLimitPerShard": 2})
    out = objects(obj)
    job = out["Job"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"], job["backoffLimitPerIndex"]) == ("Indexed", 4, 2, 2)
    pod = job["template"]["spec"]
    assert pod["restartPolicy"] == "Never" and pod["serviceAccountName"] == "demo"
    vllm = vllm_container(out["Job"])
    assert vllm["restartPolicy"] == "Always" and "startupProbe" in vllm  # native sidecar, probed first
    driver = pod["containers"][0]
    assert driver["command"] == ["pooling-operator"] and driver["args"][:2] == ["hidden-states", "run"]
    assert driver["args"][driver["args"].index("--budget-bytes") + 1] == str(2**40 // 4)
    kv = yaml.safe_load(vllm["args"][vllm["args"].index("--kv-transfer-config") + 1])
    assert kv["kv_role"] == "kv_producer"
    assert kv["kv_connector_extra_config"]["shared_storage_path"] == "/output/runs/qwen3-8b/.staging/shard-$(JOB_COMPLETION_INDEX)"
    assert {m["mountPath"] for m in vllm["volumeMounts"]} >= {"/output", "/dev/shm"}
    assert any(m["name"] == "output" for m in driver["volumeMounts"])
    spec = yaml.safe_load(vllm["args"][vllm["args"].index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == 1
    assert spec["draft_model_config"]["hf_config"]["eagle_aux_hidden_state_layer_ids"] == [3, 18, 33, 36]
    role = out["Role"]["rules"][0]
    assert role["resourceNames"] == ["demo-progress"] and "create" not in role["verbs"]
    assert out["RoleBinding"]["subjects"][0]["name"] == "demo"
    assert "data" not in out["ConfigMap"]  # the driver owns the progress data
