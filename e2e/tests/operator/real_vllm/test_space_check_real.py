"""The embedding space's canaries on real vLLM 0.32 (MiniLM on the CPU, issue 68): a PoolingService with
spec.spaceCheck records its space's reference from its first pod; a rollout to an engine that computes other
vectors stalls at the readiness gate with the old pod answering, and so does a PoolingJob pointed at that engine,
failing before it writes a vector; a rollout that changes a batching limit passes the gate and completes.

The change that drifts is `engine.maxModelLen` 256 -> 128, which the fingerprint does not cover: the canaries
are sent with `truncate_prompt_tokens: -1` (cut at the server's max model length, as clients that embed long
passages do), so the long canary (about 700 tokens) is mean-pooled over its first 128 tokens instead of its first
256 — the shape of TEI 1.9's new default truncation. bench/space_check_noise.py measured it on this build (least
cosine 0.958, the long canary) beside the float noise (none at float32, 2.1e-05 at bfloat16) and a dtype change
(float32 -> bfloat16, 9.7e-05: within the default bar; docs/embedding-space.md says so).

Three vLLM starts, each half a CPU and eager (runner_process.SMALL_SERVER_RESOURCES, EAGER_ARGS): the first pod,
then the drifting pod and the drifting job's sidecar side by side, then the batching-limit pod. The module holds
two of the pool's slots, so nothing else starts beside them on the runner's two CPUs.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import httpx
import pytest

from e2e.harness.poll import Timeout, wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import SMALL_SERVER_RESOURCES, PodRunner, eager, on_this_machine, placed
from e2e.tests.operator.real_vllm.pool import slot
from e2e.tests.operator.real_vllm.serving import Deployer, pod_of
from e2e.tests.operator.real_vllm.test_pooling_job_real import example
from e2e.tests.operator.test_services import cond, get, path
from pooling_operator.api.space_check import DEFAULT_MIN_COSINE
from pooling_operator.vllm import space_check as sc

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(900)]

POOL = [slot("space check: the rollout's surge pod"), slot("space check: the drifting PoolingJob's sidecar")]
SPACE = "guarded-v1"


def service(namespace: str, **engine: Any) -> dict[str, Any]:
    doc = on_this_machine(example("minilm-embeddings.yaml"), namespace)
    doc["metadata"]["name"] = "guarded"
    spec = doc["spec"]
    spec.update(embeddingSpace=SPACE, spaceCheck={}, resources=copy.deepcopy(SMALL_SERVER_RESOURCES))
    spec["engine"].update(engine)
    return doc


def drifting_job(namespace: str) -> dict[str, Any]:
    doc = placed(copy.deepcopy(example("minilm-corpus-embeddings.yaml")))
    doc["metadata"].update(name="guarded-corpus", namespace=namespace)
    spec = doc["spec"]
    spec["engine"]["image"] = service(namespace)["spec"]["engine"]["image"]
    spec["engine"]["maxModelLen"] = 128
    eager(spec["engine"])
    spec.update(embeddingSpace=SPACE, spaceCheck={}, resources=copy.deepcopy(SMALL_SERVER_RESOURCES), shards=1,
                parallelism=1, batchSize=8, backoffLimitPerShard=0)  # fmt: skip
    spec["dataset"] = {"volume": {"claimName": "data", "path": f"/{namespace}/corpus.jsonl"}}
    spec["output"] = {"volume": {"claimName": "data", "path": f"/{namespace}/out"}}
    return doc


def pods(cluster: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    return [p for p in get(cluster, path(namespace, "pods"))["items"] if pod_of("guarded", p["metadata"]["name"])
            and not p["metadata"].get("deletionTimestamp")]  # fmt: skip


def gate(pod: dict[str, Any]) -> dict[str, Any]:
    return sc.pod_verdict(pod) or {}


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def embeds(pod_runner: PodRunner, namespace: str, pod: str) -> bool:
    r = httpx.post(f"{pod_runner.url(namespace, pod)}/v1/embeddings", json={"model": "guarded", "input": "still here"},
                   timeout=60)  # fmt: skip
    return r.status_code == 200 and len(r.json()["data"][0]["embedding"]) == 384


def test_a_drifting_rollout_stalls_a_drifting_job_fails_and_a_batching_change_passes(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, namespace: str
) -> None:
    deployer = Deployer(cluster, pod_runner)
    pod_runner.model_claim(namespace)
    data = pod_runner.data_claim(namespace) / namespace
    data.mkdir(parents=True)
    (data / "corpus.jsonl").write_text("".join(json.dumps({"id": f"d{i}", "text": f"passage {i}"}) + "\n" for i in range(40)))
    began = time.monotonic()
    try:
        # 1. the first pod of the space records its reference
        served = deployer.serve(service(namespace))
        first = served.pod
        [pod] = pods(cluster, namespace)
        assert gate(pod)["reason"] == sc.RECORDED and ready(pod), pod["status"]
        ref = get(cluster, path(namespace, "configmaps", sc.reference_name(SPACE)))
        assert ref["data"]["recordedFrom"] == f"{namespace}/{first}" and not ref["metadata"].get("ownerReferences")
        assert len(json.loads(ref["data"]["names"])) == len(sc.builtin(scoring=False))
        obj = get(cluster, path(namespace, "poolingservices", "guarded"))
        assert cond(obj, "SpaceVerified")["status"] == "True", cond(obj, "SpaceVerified")
        recorded = time.monotonic()
        print(f"space check: reference recorded from {first} {recorded - began:.0f} s after apply")

        # 2. a rollout to maxModelLen 128 and a PoolingJob on that engine, side by side: both drift
        deployer.apply(service(namespace, maxModelLen=128))
        cluster.kubectl("apply", "-f", "-", input=json.dumps(drifting_job(namespace)))
        held = wait_for(lambda: next((p for p in pods(cluster, namespace) if p["metadata"]["name"] != first
                                      and gate(p).get("reason") == sc.DRIFT), None),
                        timeout=600, what="the new pod held back at the gate (vLLM start-up)")  # fmt: skip
        second = held["metadata"]["name"]
        vllm_up = [c for c in held["status"]["containerStatuses"] if c["name"] == "vllm"]
        assert vllm_up and vllm_up[0]["ready"] and not ready(held), held["status"]  # vLLM ready, the pod not
        assert "least cosine" in gate(held)["message"] and "canary long" in gate(held)["message"], gate(held)
        obj = wait_for(lambda: (o := get(cluster, path(namespace, "poolingservices", "guarded")))
                       and cond(o, "SpaceVerified").get("reason") == "Drift" and o, timeout=60, what="SpaceVerified Drift")  # fmt: skip
        message = cond(obj, "SpaceVerified")["message"]
        assert message.startswith(f"Pod {second} drifted: least cosine") and "long" in message, message
        worst = float(obj["status"]["spaceCheck"]["lastCheck"]["worstCosine"])
        assert worst < float(DEFAULT_MIN_COSINE), obj["status"]["spaceCheck"]
        print(f"space check: {second} held back {time.monotonic() - recorded:.0f} s after the rollout; least cosine {worst:.6f}")
        old = next(p for p in pods(cluster, namespace) if p["metadata"]["name"] == first)
        assert ready(old) and embeds(pod_runner, namespace, first)  # the old pod answers
        dep = get(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/guarded")
        assert dep["status"].get("updatedReplicas") == 1 and dep["status"].get("availableReplicas") == 1, dep["status"]

        def job_failed() -> dict[str, Any] | None:
            o = get(cluster, path(namespace, "poolingjobs", "guarded-corpus"))
            return o if cond(o, "Failed").get("status") == "True" else None

        try:
            failed = wait_for(job_failed, timeout=300, what="the drifting PoolingJob Failed")
        except Timeout:
            states = [(p["metadata"]["name"], p["status"].get("containerStatuses")) for p in get(cluster, path(namespace, "pods"))["items"]
                      if p["metadata"]["name"].startswith("guarded-corpus")]  # fmt: skip
            logs = "\n".join(pod_runner.container_log(namespace, p["name"]) for p in pod_runner.pods(namespace)
                             if p["name"].startswith("guarded-corpus"))  # fmt: skip
            raise AssertionError(f"the drifting job never failed: {states}\n{logs[-3000:]}") from None
        assert cond(failed, "Failed")["reason"] == "SpaceDrift", cond(failed, "Failed")
        out = data / "out"
        assert not list(out.rglob("*.safetensors")) and not [
            line for m in out.rglob("manifest.jsonl") for line in m.read_text().splitlines() if line.strip()
        ], "the drifting job wrote vectors"  # fmt: skip
        log = "\n".join(pod_runner.container_log(namespace, p["name"]) for p in pod_runner.pods(namespace)
                        if p["name"].startswith("guarded-corpus"))  # fmt: skip
        assert "drifted" in log and "long" in log, log[-2000:]

        # 3. a rollout that only changes a batching limit: checked against the reference, passes, completes
        third_began = time.monotonic()
        deployer.apply(service(namespace, maxNumSeqs=32))

        def completed() -> dict[str, Any] | None:
            d = get(cluster, f"/apis/apps/v1/namespaces/{namespace}/deployments/guarded")
            s = d["status"]
            live = pods(cluster, namespace)
            done = (s.get("observedGeneration") == d["metadata"]["generation"] and s.get("updatedReplicas") == 1
                    and s.get("readyReplicas") == 1 and s.get("replicas") == 1 and len(live) == 1)  # fmt: skip
            return live[0] if done else None

        final = wait_for(completed, timeout=600, what="the batching-limit rollout completed")
        name = final["metadata"]["name"]
        assert name not in (first, second) and gate(final)["reason"] == sc.VERIFIED and ready(final), final["status"]
        obj = wait_for(lambda: (o := get(cluster, path(namespace, "poolingservices", "guarded")))
                       and cond(o, "SpaceVerified").get("status") == "True" and o, timeout=60, what="SpaceVerified True")  # fmt: skip
        last = obj["status"]["spaceCheck"]["lastCheck"]
        assert last["pod"] == name and last["result"] == sc.VERIFIED and float(last["worstCosine"]) >= float(DEFAULT_MIN_COSINE)
        assert embeds(pod_runner, namespace, name)
        print(f"space check: the batching-limit rollout completed {time.monotonic() - third_began:.0f} s after apply, "
              f"least cosine {float(last['worstCosine']):.9f}; {time.monotonic() - began:.0f} s in all")
    finally:
        cluster.kubectl("delete", "poolingjob", "guarded-corpus", "-n", namespace, "--wait=false", check=False)
        deployer.close()
