"""The operator's autoscaler in a closed loop on real vLLM: MiniLM served through the pod runner, a real Prometheus
scraping the real ``/metrics`` of each Ready pod, a load step from a client that routes as kube-proxy would
(e2e/podrunner/traffic.py: the Service's EndpointSlices, mapped to local ports through the runner's records), 1 -> 2
replicas, then back to 1 under a light load that keeps flowing through the drain. Nothing may be lost: the
client never retries, so every non-200 answer and every connection error counts. Then scale to zero on the same
service: turned to minReplicas 0 with a wake query on a stand-in front, idle it goes to 0 and the front's demand
brings a replica back that answers as the one before it.

Phases are printed with their times. The module holds both of the server pool's slots: its two replicas are the
only vLLM processes running while it does.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.prometheus import PrometheusServer, PrometheusUnavailable
from e2e.operator_process import OperatorProcess
from e2e.podrunner.kubelet import OWN_CORE_ANNOTATION
from e2e.podrunner.runner_process import EAGER_ARGS, SMALL_SERVER_RESOURCES, PodRunner
from e2e.podrunner.traffic import RunnerTargets, SliceClient, _local_port
from e2e.standin.front import StandinFront
from e2e.tests.operator.real_vllm.conftest import Deployer
from e2e.tests.operator.real_vllm.pool import slot
from e2e.tests.operator.real_vllm.test_embeddings import minilm as embeddings_minilm
from tests.unavailable import unavailable

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(900)]

POOL = [slot("closed loop: replica 1"), slot("closed loop: replica 2")]
COMPONENT = "pooling-service"
# ~200 tokens a request: a step of the 2048-token batch budget then holds ~10 requests, so 32 senders keep
# requests waiting in vLLM's scheduler and its p99 above the target (ServiceParams: ~0.27 ms per token)
TEXT = " ".join(["pods run on nodes and serve embeddings to clients"] * 16)  # 194 tokens for MiniLM's tokenizer
HEAVY_WORKERS, LIGHT_WORKERS, LIGHT_PAUSE = 32, 1, 0.2
SCALE_DOWN_WINDOW = 12  # stabilization: 12 s of the light load before the scale-down (issue 67: was 20)
END_TO_END_LIMIT = 480.0  # the issue's 8 minutes on the 2-core machine



@pytest.fixture(scope="module")
def prometheus(cluster: ControlPlane) -> Iterator[PrometheusServer]:
    try:
        server = PrometheusServer(Path(cluster.run_dir) / "prometheus-closed-loop", scrape_interval="1s").start()
    except PrometheusUnavailable as exc:
        unavailable(f"no Prometheus: {exc}")
    yield server
    server.stop()


def minilm(namespace: str, policy: str) -> dict[str, Any]:
    """test_embeddings' MiniLM, without the API key, eager, on half a CPU, autoscaled between 1 and 2."""
    doc = embeddings_minilm(namespace, policy)
    spec = doc["spec"]
    del spec["service"]
    spec["engine"]["extraArgs"] = list(EAGER_ARGS)
    spec["resources"] = SMALL_SERVER_RESOURCES
    spec["template"] = {"annotations": {OWN_CORE_ANNOTATION: "true"}}  # each replica a core of its own
    spec["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, "window": "5s", "p99Latency": "500ms",
                           "scaleDown": {"stabilizationSeconds": SCALE_DOWN_WINDOW}, "policyRef": {"name": policy}}
    return doc


def replicas(cluster: ControlPlane, namespace: str) -> int:
    assert cluster.api is not None
    return int(cluster.api.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/minilm")["spec"]["replicas"])


def pods(cluster: ControlPlane, namespace: str) -> list[str]:
    assert cluster.api is not None
    items = cluster.api.get(f"/api/v1/namespaces/{namespace}/pods",
                            params={"labelSelector": "app.kubernetes.io/instance=minilm"})["items"]
    return sorted(p["metadata"]["name"] for p in items)


def diagnosis(cluster: ControlPlane, prometheus: PrometheusServer, ns: str, client: SliceClient, since: float) -> str:
    """What the autoscaler saw and what the client got, for a failure message."""
    assert cluster.api is not None
    svc = cluster.api.get(f"/apis/vllm-pooling.io/v1alpha1/namespaces/{ns}/poolingservices/minilm")
    st = svc.get("status") or {}
    conds = {c["type"]: (c["status"], c.get("reason"), c.get("message")) for c in st.get("conditions") or []}
    seen = {q: prometheus.value(f'{q}{{namespace="{ns}"}}') for q in ("vllm:num_requests_waiting", "vllm:num_requests_running")}
    answered = [o for o in client.outcomes if o.t >= since and o.status == 200]
    mean = sum(o.seconds for o in answered) / len(answered) if answered else None
    return (f"status.autoscaling: {st.get('autoscaling')}\nconditions: {conds}\nprometheus: {seen}\n"
            f"client since the step: {len(answered)} answered, mean {mean} s, {len(client.lost(since))} lost "
            f"(first: {client.lost(since)[:1]})")


ZERO_IDLE_SECONDS = 30  # idle this long after the load stops -> 0: the API's least scaleToZero.idleSeconds


def embed_once(pod_runner: PodRunner, ns: str, pod: str) -> list[float]:
    port = _local_port(pod_runner, ns, pod)
    assert port is not None, pod
    r = httpx.post(f"http://127.0.0.1:{port}/v1/embeddings", json={"model": "minilm", "input": [TEXT]}, timeout=120)
    assert r.status_code == 200, r.text[:300]
    return r.json()["data"][0]["embedding"]


def to_zero_and_back(cluster: ControlPlane, pod_runner: PodRunner, prometheus: PrometheusServer, client: SliceClient,
                     ns: str, phase: Any) -> dict[str, Any]:  # fmt: skip
    """Scale to zero on real vLLM (issue 47): the same service turned to minReplicas 0 with a wake query on a
    stand-in of the KEDA HTTP add-on's interceptor. Idle, it goes to 0 replicas; with requests held at the front it
    gets one again, which answers the first request as the replica before it did; status says how long it took."""
    [pod] = client.endpoints()
    before = embed_once(pod_runner, ns, pod)
    with StandinFront(prometheus, ns, "minilm") as front:
        front.set(0)
        stopped = time.monotonic()
        autoscaling = {"minReplicas": 0, "wake": {"prometheus": {"query": front.query}},
                       "scaleToZero": {"idleSeconds": ZERO_IDLE_SECONDS}}  # fmt: skip
        cluster.kubectl("patch", "poolingservice", "minilm", "-n", ns, "--type=merge", "-p",
                        json.dumps({"spec": {"autoscaling": autoscaling}}))  # fmt: skip
        wait_for(lambda: replicas(cluster, ns) == 0, timeout=ZERO_IDLE_SECONDS + 90, what="0 replicas after the idle time",
                 interval=0.5)  # fmt: skip
        to_zero = time.monotonic() - stopped
        phase("scaled to 0 (idle)")
        wait_for(lambda: not pods(cluster, ns), timeout=120, what="the last pod gone")
        front.set(1)  # one request held at the front
        woke = time.monotonic()
        wait_for(lambda: replicas(cluster, ns) == 1, timeout=30, what="a replica asked for on the front's demand", interval=0.5)
        phase("woken: 1 replica asked for")
        wait_for(lambda: len(client.endpoints()) == 1, timeout=300, what="the woken replica Ready and in the slice")
        woken = time.monotonic() - woke
        phase("woken replica Ready")
        [pod] = client.endpoints()
        after = embed_once(pod_runner, ns, pod)
        front.set(0)

        def said() -> dict[str, Any] | None:
            obj = cluster.api.get(f"/apis/vllm-pooling.io/v1alpha1/namespaces/{ns}/poolingservices/minilm")  # type: ignore[union-attr]
            status = obj.get("status") or {}
            wake = ((status.get("autoscaling") or {}).get("scaledToZero") or {}).get("lastWake") or {}
            return status if "firstReadySeconds" in wake else None

        status = wait_for(said, timeout=60, what="status saying how long the wake took")
    cosine = sum(a * b for a, b in zip(before, after, strict=True)) / math.sqrt(
        sum(a * a for a in before) * sum(b * b for b in after))
    assert cosine >= 0.99999, cosine
    wake = status["autoscaling"]["scaledToZero"]["lastWake"]
    assert wake["by"] == "the wake query read 1" and 0 < wake["firstReadySeconds"] <= woken + 5, (wake, woken)
    assert status["startup"]["lastSeconds"] > 0, status["startup"]
    return {"to_zero": to_zero, "woken": woken, "first_ready": wake["firstReadySeconds"],
            "startup": status["startup"]["lastSeconds"], "cosine": cosine}


def test_the_operator_scales_real_vllm_up_on_a_load_step_and_drains_it_down_losing_nothing(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, module_namespace: str,
    prometheus: PrometheusServer,
) -> None:  # fmt: skip
    ns, api = module_namespace, cluster.api
    assert api is not None
    began = time.monotonic()
    phases: list[tuple[str, float]] = []

    def phase(name: str) -> None:
        phases.append((name, time.monotonic() - began))
        print(f"closed loop: {name} at {phases[-1][1]:.1f} s")

    policy = f"closed-loop-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=(
        f"apiVersion: vllm-pooling.io/v1alpha1\nkind: AutoscalingPolicy\nmetadata: {{name: {policy}}}\n"
        f"spec: {{prometheus: {{url: '{prometheus.url}', timeout: 2s}}}}\n"
    ))  # fmt: skip
    deployer = Deployer(cluster, pod_runner)
    targets = RunnerTargets(api, pod_runner, prometheus, ns, "minilm", COMPONENT)
    client = SliceClient(api, pod_runner, ns, "minilm", "/v1/embeddings", {"model": "minilm", "input": [TEXT]})
    try:
        deployer.serve(minilm(ns, policy))
        targets.start()
        client.start()
        phase("one replica Ready")
        wait_for(lambda: len(client.endpoints()) == 1, timeout=30, what="the Ready pod in the Service's EndpointSlice")
        wait_for(lambda: prometheus.value(f'count(up{{namespace="{ns}"}} == 1)') == 1, timeout=30,
                 what="Prometheus scraping the real /metrics")

        client.load(LIGHT_WORKERS, pause=LIGHT_PAUSE, seconds=60)
        wait_for(lambda: client.outcomes, timeout=30, what="the first answer through the slice")
        assert not client.lost(), client.lost()[:3]
        client.load(HEAVY_WORKERS, seconds=360)
        stepped = time.monotonic()
        phase(f"load step: {HEAVY_WORKERS} senders")
        try:
            wait_for(lambda: replicas(cluster, ns) == 2, timeout=120, what="the operator's scale-up to 2", interval=0.5)
        except Exception as exc:
            raise AssertionError(f"{exc}\n{diagnosis(cluster, prometheus, ns, client, stepped)}") from None
        phase("scaled to 2 (Deployment written)")
        up_seconds = time.monotonic() - stepped
        wait_for(lambda: len(client.endpoints()) == 2, timeout=300, what="the second replica Ready and in the slice")
        phase("second replica Ready and in the slice")
        second = next(p for p in client.endpoints() if p != client.changes[0][1][0])
        both = time.monotonic()
        wait_for(lambda: client.served(both).get(second, 0) >= 20, timeout=60, what="the second replica serving")
        phase("both replicas serving")

        client.load(LIGHT_WORKERS, pause=LIGHT_PAUSE, seconds=300)
        light = time.monotonic()
        phase(f"light load: {LIGHT_WORKERS} sender, {LIGHT_PAUSE} s apart")
        wait_for(lambda: replicas(cluster, ns) == 1, timeout=SCALE_DOWN_WINDOW + 90, what="the scale-down to 1",
                 interval=0.5)
        down = time.monotonic()
        phase("scaled to 1 (Deployment written)")
        wait_for(lambda: len(pods(cluster, ns)) == 1, timeout=120, what="the removed pod gone (drained and stopped)")
        drained = time.monotonic()
        phase("the removed pod gone")
        after = time.monotonic()
        wait_for(lambda: sum(client.served(after).values()) >= 10, timeout=60, what="the light load still answered")
        client.stop_load()
        phase("load stopped")
        closed_changes = list(client.changes)  # the closed loop's; the zero phase below adds its own
        zero = to_zero_and_back(cluster, pod_runner, prometheus, client, ns, phase)
    finally:
        client.stop()
        targets.stop()
        deployer.close()
        cluster.kubectl("delete", "autoscalingpolicy", policy, "--wait=false", check=False)

    total = time.monotonic() - began
    served = client.served()
    lost_all = client.lost()
    lost_drain = client.lost(light, drained)
    print(f"closed loop: load step -> scale-up write {up_seconds:.1f} s; light load -> scale-down write {down - light:.1f} s; "
          f"scale-down -> pod gone {drained - down:.1f} s; {sum(served.values())} answered ({served}), "
          f"{len(lost_all)} lost; {total:.0f} s in all")
    print("closed loop: slice changes " + ", ".join(f"{t - began:.1f} s {list(p)}" for t, p in client.changes))
    assert not lost_drain, f"lost during the scale-down: {lost_drain[:5]}"
    assert not lost_all, f"lost: {lost_all[:5]}"
    assert len(served) == 2 and all(n > 0 for n in served.values()), served
    # the slice dropped the removed pod before it stopped answering: it was deleted after the scale-down write
    assert [len(p) for _, p in closed_changes][-2:] == [2, 1], closed_changes
    assert total <= END_TO_END_LIMIT, f"the closed loop took {total:.0f} s (limit {END_TO_END_LIMIT:.0f} s)"
    print(f"scale to zero: idle -> 0 replicas {zero['to_zero']:.1f} s after the load stopped (idleSeconds "
          f"{ZERO_IDLE_SECONDS}); front demand -> Ready {zero['woken']:.1f} s; status: firstReadySeconds "
          f"{zero['first_ready']}, startup.lastSeconds {zero['startup']}; the first answer after the wake equals the "
          f"last before it (cosine {zero['cosine']:.7f})")
