"""The built-in autoscaler in a closed loop: the running operator, the real API server, a real Prometheus, and
metric exporters standing in for vLLM (e2e/standin, driven by the same service model as the simulator).

Every wait polls with a deadline; nothing sleeps to synchronise. The operator decides every 2 s here
(VPO_AUTOSCALE_SECONDS, set by the operator fixture) and Prometheus scrapes every 1 s.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.harness.config import GPU_PRODUCT, MIG_RESOURCE
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.prometheus import PrometheusServer, PrometheusUnavailable
from e2e.operator_process import OperatorProcess
from e2e.standin.exporters import READY_AFTER_ANNOTATION, ExporterFleet, write_load
from e2e.standin.front import StandinFront
from e2e.tests.operator.conftest import AUTOSCALE_SECONDS, COST_WINDOW_SECONDS
from e2e.tests.operator.test_services import _resyncs, apply, cond, events, get, operator_writes, path, svc
from pooling_operator.api.clock import parse_time
from pooling_operator.vllm.metrics import WAITING, matchers
from tests.unavailable import unavailable

SCRAPE_SECONDS = 1.0
POLICIES = "/apis/vllm-pooling.io/v1alpha1/autoscalingpolicies"


@pytest.fixture(scope="module")
def prometheus(cluster: ControlPlane) -> Iterator[PrometheusServer]:
    try:
        server = PrometheusServer(Path(cluster.run_dir) / "prometheus-autoscaling", scrape_interval=f"{SCRAPE_SECONDS:g}s").start()
    except PrometheusUnavailable as exc:
        unavailable(f"no Prometheus: {exc}")
    yield server
    server.stop()


@pytest.fixture
def policy(cluster: ControlPlane, prometheus: PrometheusServer) -> Iterator[Any]:
    """A factory of cluster-scoped policies pointing at the test's Prometheus; deleted afterwards."""
    made: list[str] = []

    def make(**spec: Any) -> str:
        name = f"e2e-{uuid.uuid4().hex[:8]}"
        apply(cluster, {
            "apiVersion": "vllm-pooling.io/v1alpha1", "kind": "AutoscalingPolicy", "metadata": {"name": name},
            "spec": {"prometheus": {"url": prometheus.url, "timeout": "2s"}, **spec},
        })
        made.append(name)
        return name

    yield make
    for name in made:
        cluster.api.request("DELETE", f"{POLICIES}/{name}")  # type: ignore[union-attr]


INTERCEPTOR = "http://keda-add-ons-http-interceptor-proxy.keda:8080"  # the operator's default (--keda-http-interceptor)


def autoscaled(namespace: str, name: str, policy: str, **autoscaling: Any) -> dict[str, Any]:
    spec = {
        "autoscaling": {
            "minReplicas": 1, "maxReplicas": 6, "window": "5s", "p99Latency": "250ms",
            "scaleDown": {"stabilizationSeconds": 10}, "policyRef": {"name": policy}, **autoscaling,
        },
        # model loading takes time: long enough for a decision period (2 s) to see replicas loading even on a
        # loaded CI machine (4 s missed it once)
        "template": {"annotations": {READY_AFTER_ANNOTATION: "8s"}},
    }
    return svc(namespace, name=name, spec=spec)


def replicas(cluster: ControlPlane, namespace: str, name: str) -> int:
    dep = get(cluster, path(namespace, "deployments", name))
    return int(dep["spec"]["replicas"]) if dep else -1


def status(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    return get(cluster, path(namespace, "poolingservices", name)) or {}


def fleet(cluster: ControlPlane, prometheus: PrometheusServer, namespace: str, name: str, load: Path) -> ExporterFleet:
    return ExporterFleet(cluster, namespace, name, "pooling-service", name, prometheus, load).start()


def step_visible_at(prometheus: PrometheusServer, namespace: str, name: str, step_wall: float) -> float | None:
    """Seconds from ``step_wall`` (time.time() at the load step) to the first scrape after it in which the
    service's pods reported more requests waiting than in any scrape of the minute before it: when the step
    reached the operator's queries (the exporters' poll and Prometheus's scrape are not the operator's to answer
    for, and on a loaded machine they add seconds)."""
    series = prometheus.samples(f'{WAITING}{{{matchers(namespace, name, "pooling-service")}}}', 180)
    points = sorted(p for _, values in series for p in values)
    before = [v for t, v in points if step_wall - 60 <= t < step_wall]
    return next((t - step_wall for t, v in points if t >= step_wall and v > max(before, default=0.0)), None)


# After the step is visible in Prometheus: one decision period, then the scale write and this test's poll.
REACTION_AFTER_VISIBLE = AUTOSCALE_SECONDS + 1.5

RECOMMENDATION_SAMPLE_SLACK = 1.0  # a 0.2 s sampling period plus a GET on a loaded CI machine
RECOMMENDS = re.compile(r"\brecommends (\d+)\b")


class RecommendationSampler:
    """Samples the raw recommendation the operator writes into status.autoscaling.reason (``<signal>
    recommends N``) every 0.2 s in a thread; ``stop`` returns the (time, N) samples. Sampling a value over
    time, not waiting for one: the test reads the record afterwards."""

    def __init__(self, read: Any) -> None:
        self._read = read
        self._samples: list[tuple[float, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="recommendations", daemon=True)

    def start(self) -> RecommendationSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + 300  # bounded even when a failing test never calls stop
        while not self._done.wait(0.2) and time.monotonic() < deadline:
            try:
                reason = ((self._read().get("status") or {}).get("autoscaling") or {}).get("reason") or ""
            except Exception:  # a GET that failed is a missed sample, not a failure of the test
                continue
            if m := RECOMMENDS.search(reason):
                self._samples.append((time.monotonic(), int(m.group(1))))

    def stop(self) -> list[tuple[float, int]]:
        self._done.set()
        self._thread.join(timeout=5)
        return list(self._samples)


def metrics_flowing(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any] | None:
    obj = status(cluster, namespace, name)
    return obj if cond(obj, "MetricsAvailable").get("status") == "True" else None


def test_load_step_scales_up_fast_and_down_only_after_the_window(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=40)
    apply(cluster, autoscaled(namespace, "emb", policy()))
    with fleet(cluster, prometheus, namespace, "emb", load) as f:
        f.wait_targets(1, timeout=60)
        obj = wait_for(lambda: metrics_flowing(cluster, namespace, "emb"), timeout=60, what="MetricsAvailable=True")
        assert obj["status"]["autoscaling"]["desiredReplicas"] == 1 and replicas(cluster, namespace, "emb") == 1

        # A load step to ~3x one replica's capacity: the waiting gauge and p99 move at once.
        sampler = RecommendationSampler(lambda: status(cluster, namespace, "emb")).start()
        stepped, stepped_wall = time.monotonic(), time.time()
        write_load(load, requests_per_second=600)
        wait_for(lambda: replicas(cluster, namespace, "emb") > 1, timeout=30, what="a scale-up", interval=0.1, max_interval=0.1)
        reaction = time.monotonic() - stepped
        visible = wait_for(lambda: step_visible_at(prometheus, namespace, "emb", stepped_wall), timeout=10,
                           what="the step in Prometheus")
        print(f"\nload step -> in Prometheus {visible:.2f}s -> first scale write {reaction:.2f}s")
        # From the step in Prometheus: one decision period, and 1.5 s for the scale write and this poll. (Two
        # scrapes and the exporters' poll before it were 2 * SCRAPE_SECONDS + 1.5 s in all on a quiet machine,
        # and seconds more on a busy one: not the operator's reaction.)
        assert reaction - visible <= REACTION_AFTER_VISIBLE, (visible, reaction)
        # The event follows the scale write (a separate request): wait for it rather than race it.
        ups = wait_for(lambda: [e for e in events(cluster, namespace, "emb") if e["reason"] == "ScaledUp"], timeout=10,
                       what="the ScaledUp event")
        assert "scaling 1 ->" in ups[0]["message"]

        # New replicas load their model (the kwok stand-in holds them 8 s): not capacity, not reporting.
        def loading() -> dict[str, Any] | None:
            a = (status(cluster, namespace, "emb").get("status") or {}).get("autoscaling") or {}
            return a if a.get("readyReplicas", 0) < a.get("currentReplicas", 0) else None

        seen = wait_for(loading, timeout=20, what="a decision taken while replicas load", interval=0.2, max_interval=0.2)
        reporting = prometheus.value(f'count(vllm:num_requests_waiting{{namespace="{namespace}"}})')
        assert reporting is not None and reporting <= seen["currentReplicas"]

        def settled() -> int | None:
            n = replicas(cluster, namespace, "emb")
            a = (status(cluster, namespace, "emb").get("status") or {}).get("autoscaling") or {}
            return n if n >= 3 and a.get("readyReplicas") == n and a.get("desiredReplicas") == n else None

        peak = wait_for(settled, timeout=90, what="enough ready replicas for 600 req/s")

        # The end of the load: nothing may go before the 10 s scale-down window has passed since the last
        # recommendation of the peak. That can precede the end of the load (the up step may overshoot what
        # demand then asks for), so the window is measured from the recommendations in status, sampled
        # throughout: from the first sample showing a lower one, which the operator wrote one decision period
        # after the last of the peak at most.
        write_load(load, requests_per_second=0)
        wait_for(lambda: replicas(cluster, namespace, "emb") < peak, timeout=60, what="a scale-down", interval=0.2, max_interval=0.5)
        down = time.monotonic()
        samples = sampler.stop()
        last = max((i for i, (_, raw) in enumerate(samples) if raw >= peak), default=None)
        assert last is not None, f"no recommendation of {peak} was seen: {samples}"
        anchor = samples[last + 1][0] if last + 1 < len(samples) else down
        print(f"first recommendation below {peak} seen -> scale-down: {down - anchor:.2f}s")
        assert down - anchor >= 10 - AUTOSCALE_SECONDS - RECOMMENDATION_SAMPLE_SLACK
        assert not f.failures


def test_no_metrics_holds_replicas_and_recovers(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=100)  # well inside two replicas' capacity: stays at minReplicas
    apply(cluster, autoscaled(namespace, "emb", policy(), minReplicas=2))
    with fleet(cluster, prometheus, namespace, "emb", load):
        wait_for(lambda: metrics_flowing(cluster, namespace, "emb"), timeout=60, what="MetricsAvailable=True")
        before = replicas(cluster, namespace, "emb")
        assert before == 2
        prometheus.stop()
        try:
            write_load(load, requests_per_second=2000)  # would scale up, were it seen

            def unreachable() -> dict[str, Any] | None:
                obj = status(cluster, namespace, "emb")
                c = cond(obj, "MetricsAvailable")
                return obj if c.get("status") == "False" and c.get("reason") == "PrometheusUnreachable" else None

            wait_for(unreachable, timeout=30, what="MetricsAvailable=False PrometheusUnreachable")
            held = replicas(cluster, namespace, "emb")
            assert held >= before
            # Held: several decision periods pass without a change (fail static).
            deadline = time.monotonic() + 3 * AUTOSCALE_SECONDS
            while time.monotonic() < deadline:
                assert replicas(cluster, namespace, "emb") == held
                time.sleep(0.2)  # sampling the replica count over a window, not waiting for an event
            assert any(e["reason"] == "PrometheusUnreachable" and e["type"] == "Warning" for e in events(cluster, namespace, "emb"))
        finally:
            prometheus.restart()
        wait_for(lambda: metrics_flowing(cluster, namespace, "emb"), timeout=60, what="MetricsAvailable=True again")
        wait_for(lambda: replicas(cluster, namespace, "emb") > held, timeout=60, what="scaling resumes")


def limited(cluster: ControlPlane, namespace: str, name: str, reason: str) -> dict[str, Any] | None:
    obj = status(cluster, namespace, name)
    c = cond(obj, "ScalingLimited")
    return obj if c.get("status") == "True" and c.get("reason") == reason else None


def test_policy_cap_holds(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=2000)
    capped = policy(limits={"maxReplicas": 2})
    apply(cluster, autoscaled(namespace, "capped", capped))
    with fleet(cluster, prometheus, namespace, "capped", load):
        obj = wait_for(lambda: limited(cluster, namespace, "capped", "PolicyMaxReplicas"), timeout=60,
                       what="ScalingLimited PolicyMaxReplicas")
        assert replicas(cluster, namespace, "capped") == 2
        assert "limits.maxReplicas is 2" in cond(obj, "ScalingLimited")["message"]
        wait_for(lambda: any(e["reason"] == "PolicyMaxReplicas" and e["type"] == "Warning" for e in events(cluster, namespace, "capped")),
                 timeout=15, what="the PolicyMaxReplicas event")


def test_namespace_gpu_budget_holds_while_two_services_race(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=2000)
    budget = policy(limits={"maxGPUsPerNamespace": 3})
    apply(cluster, autoscaled(namespace, "a", budget))
    apply(cluster, autoscaled(namespace, "b", budget))
    fleets = [fleet(cluster, prometheus, namespace, n, load) for n in ("a", "b")]
    try:
        wait_for(lambda: limited(cluster, namespace, "a", "NamespaceGPUBudget") or limited(cluster, namespace, "b", "NamespaceGPUBudget"),
                 timeout=60, what="ScalingLimited NamespaceGPUBudget")
        # Both want far more than 3 GPUs; the namespace's one owner never lets them overshoot.
        deadline = time.monotonic() + 4 * AUTOSCALE_SECONDS
        while time.monotonic() < deadline:
            assert replicas(cluster, namespace, "a") + replicas(cluster, namespace, "b") <= 3
            time.sleep(0.2)  # sampling over a window, not waiting for an event
        assert replicas(cluster, namespace, "a") + replicas(cluster, namespace, "b") == 3
        wait_for(lambda: (get(cluster, f"{POLICIES}/{budget}") or {}).get("status", {}).get("services") == 2,
                 timeout=60, what="the policy counts its 2 services")
    finally:
        for f in fleets:
            f.close()


def test_the_gpu_budget_counts_autoscaled_services_only_and_mig_slices(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    """A fixed 2-GPU service beside an autoscaled one on MIG slices, with maxGPUsPerNamespace 3: the fixed one is
    not the autoscaler's to count, the slices are. Before, the cache's projection of managedFields made every
    Deployment look autoscaled (the fixed service ate 2 of the 3: stuck at 1 replica) and limits whose name does
    not end in "gpu" were not counted (the slices never filled the budget: up to maxReplicas)."""
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=2000)
    budget = policy(limits={"maxGPUsPerNamespace": 3})
    fixed = svc(namespace, name="fixed", spec={"replicas": 1, "resources": {"gpu": {"count": 2}, "cpu": "1", "memory": "1Gi"}})
    apply(cluster, fixed)
    grow = autoscaled(namespace, "grow", budget)
    grow["spec"]["resources"] = {"gpu": {"count": 1, "resourceName": MIG_RESOURCE}, "cpu": "1", "memory": "1Gi"}
    apply(cluster, grow)
    with fleet(cluster, prometheus, namespace, "grow", load):
        def full() -> dict[str, Any] | None:
            obj = limited(cluster, namespace, "grow", "NamespaceGPUBudget")
            return obj if obj and "hold 3 of the 3 GPUs" in cond(obj, "ScalingLimited")["message"] else None

        obj = wait_for(full, timeout=90, what="ScalingLimited NamespaceGPUBudget with the budget's 3 GPUs held")
        assert replicas(cluster, namespace, "grow") == 3 and replicas(cluster, namespace, "fixed") == 1
        assert "of 1 GPU each" in cond(obj, "ScalingLimited")["message"]
        # Held there: several decision periods pass without growth.
        deadline = time.monotonic() + 3 * AUTOSCALE_SECONDS
        while time.monotonic() < deadline:
            assert replicas(cluster, namespace, "grow") == 3
            time.sleep(0.2)  # sampling the replica count over a window, not waiting for an event


def test_changing_the_p99_target_leaves_the_pods_alone(
    cluster: ControlPlane, operator: OperatorProcess, policy: Any, namespace: str
) -> None:
    name = policy()
    apply(cluster, autoscaled(namespace, "emb", name))
    dep = wait_for(lambda: get(cluster, path(namespace, "deployments", "emb")), timeout=60, what="Deployment")
    apply(cluster, autoscaled(namespace, "emb", name, p99Latency="2s"))

    def observed() -> dict[str, Any] | None:
        obj = status(cluster, namespace, "emb")
        return obj if obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"] == 2 else None

    wait_for(observed, timeout=60, what="the new generation reconciled")
    after = get(cluster, path(namespace, "deployments", "emb"))
    assert after["spec"]["template"] == dep["spec"]["template"]
    assert after["metadata"]["generation"] == dep["metadata"]["generation"]


def test_keda_backend_renders_a_scaled_object_keda_admits(
    cluster: ControlPlane, operator: OperatorProcess, policy: Any, namespace: str
) -> None:
    apply(cluster, autoscaled(namespace, "emb", policy(), backend="keda"))
    so_path = f"/apis/keda.sh/v1alpha1/namespaces/{namespace}/scaledobjects/emb"
    so = wait_for(lambda: get(cluster, so_path), timeout=60, what="ScaledObject admitted by KEDA's CRD")
    assert [t["name"] for t in so["spec"]["triggers"]] == ["waiting", "p99"]
    assert so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 10
    # KEDA scales this one: the built-in autoscaler leaves no status or conditions of its own.
    obj = status(cluster, namespace, "emb")
    assert "autoscaling" not in obj.get("status", {}) and not cond(obj, "MetricsAvailable")


def test_policy_namespace_selector_and_min_replicas_zero(
    cluster: ControlPlane, operator: OperatorProcess, policy: Any, namespace: str
) -> None:
    elsewhere = policy(namespaceSelector={"matchLabels": {"team": "search"}})
    apply(cluster, autoscaled(namespace, "emb", elsewhere))

    def refused() -> dict[str, Any] | None:
        obj = status(cluster, namespace, "emb")
        return obj if cond(obj, "SpecValid").get("reason") == "PolicyNotAllowed" else None

    obj = wait_for(refused, timeout=60, what="SpecValid=False PolicyNotAllowed")
    assert "namespaceSelector" in cond(obj, "SpecValid")["message"]
    assert get(cluster, path(namespace, "deployments", "emb")) is None
    # Labelling the namespace lets the policy apply, without touching the service.
    cluster.kubectl("label", "namespace", namespace, "team=search")
    cluster.kubectl("annotate", "poolingservice", "-n", namespace, "emb", "e2e/nudge=1")  # an event now, not at resync
    wait_for(lambda: get(cluster, path(namespace, "deployments", "emb")), timeout=60, what="Deployment once selected")

    zero = autoscaled(namespace, "zero", elsewhere, minReplicas=0)
    out = apply(cluster, zero, check=False)
    assert out.returncode != 0 and "minReplicas 0 needs a wake signal" in (out.stderr + out.stdout)


def test_an_idle_autoscaled_service_is_quiet(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    """No write when nothing changes: the autoscaler's decisions and a reconcile of an idle autoscaled service
    send no mutating request (neither side rewrites the other's status fields)."""
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=0)
    apply(cluster, autoscaled(namespace, "emb", policy()))
    with fleet(cluster, prometheus, namespace, "emb", load):
        def idle() -> dict[str, Any] | None:
            obj = metrics_flowing(cluster, namespace, "emb")
            a = ((obj or {}).get("status") or {}).get("autoscaling") or {}
            return obj if a.get("recommendations", {}).get("idle") == 1 and cond(obj, "Ready").get("status") == "True" else None

        wait_for(idle, timeout=90, what="an idle, Ready service with metrics")
        # and status.cost of a whole window (the first, begun before the service, is shorter): the same every window
        wait_for(lambda: (status(cluster, namespace, "emb").get("status") or {}).get("cost", {}).get("gpuSeconds") == COST_WINDOW_SECONDS,
                 timeout=3 * COST_WINDOW_SECONDS + 10, what="the cost of a whole window")
        before, visits, posted = operator_writes(operator), _resyncs(operator), len(events(cluster, namespace, "emb"))
        started = time.monotonic()
        cluster.kubectl("annotate", "poolingservice", "-n", namespace, "emb", "e2e/nudge=quiet")  # a reconcile now
        wait_for(lambda: _resyncs(operator) >= visits + 1 and time.monotonic() - started >= 4 * AUTOSCALE_SECONDS,
                 timeout=60, what="a reconcile and four decisions")
        assert operator_writes(operator) == before
        assert len(events(cluster, namespace, "emb")) == posted


def test_an_idle_service_goes_to_zero_stays_there_and_the_fronts_demand_wakes_it(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    """minReplicas 0 behind the KEDA HTTP add-on as its front (autoscaling.front.kedaHttpAddOn, no wake query): the
    operator's InterceptorRoute is admitted by the add-on's own CRD in the real API server, status.endpoint names the
    interceptor, and the wake signal is the interceptor's request-concurrency series for that route (a stand-in
    exports it into the real Prometheus). Idle for its 30 s the service goes 1 -> 0, decides to stay at 0 while the
    front holds nothing, and 0 -> 1 once the front holds requests; conditions, events and
    status.autoscaling.scaledToZero say each step."""
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=0)
    with StandinFront(prometheus, namespace, "zero") as front:
        front.set(0)
        hosts = ["zero.search.example.com", "*.zero.example.com"]
        apply(cluster, autoscaled(namespace, "zero", policy(), minReplicas=0, front={"kedaHttpAddOn": {"hosts": hosts}},
                                  scaleToZero={"idleSeconds": 30}))  # fmt: skip
        route = wait_for(lambda: get(cluster, f"/apis/http.keda.sh/v1beta1/namespaces/{namespace}/interceptorroutes/zero"),
                         timeout=30, what="the InterceptorRoute, admitted by the add-on's CRD")  # fmt: skip
        assert route["spec"]["target"] == {"service": "zero", "port": 8000}, route["spec"]
        assert route["spec"]["rules"] == [{"hosts": hosts}] and route["spec"]["timeouts"]["readiness"].endswith("s"), route["spec"]
        assert route["metadata"]["ownerReferences"][0]["kind"] == "PoolingService"
        wait_for(lambda: (status(cluster, namespace, "zero").get("status") or {}).get("endpoint") == INTERCEPTOR, timeout=30,
                 what="status.endpoint naming the interceptor")  # fmt: skip
        with fleet(cluster, prometheus, namespace, "zero", load):
            wait_for(lambda: metrics_flowing(cluster, namespace, "zero"), timeout=60, what="MetricsAvailable=True")
            serving = cond(status(cluster, namespace, "zero"), "ScaledToZero")
            assert (serving.get("status"), serving.get("reason")) == ("False", "Serving"), serving
            up = time.monotonic()
            wait_for(lambda: replicas(cluster, namespace, "zero") == 0, timeout=90, what="0 replicas after the idle time")
            idle_for = time.monotonic() - up
            assert idle_for >= 30 - 2 * AUTOSCALE_SECONDS, idle_for  # never before the idle time

            def at_zero(reason: str) -> dict[str, Any] | None:
                obj = status(cluster, namespace, "zero")
                return obj if cond(obj, "ScaledToZero").get("reason") == reason and cond(obj, "ScaledToZero")["status"] == "True" else None

            obj = wait_for(lambda: at_zero("Idle"), timeout=20, what="ScaledToZero=True Idle")
            a = obj["status"]["autoscaling"]
            assert a["scaledToZero"]["since"] and "idle for" in a["reason"], a
            # Ready is the reconcile's, from the Deployment at 0 (the autoscaler wrote ScaledToZero): a moment later
            wait_for(lambda: cond(status(cluster, namespace, "zero"), "Ready").get("reason") == "ScaledToZero", timeout=20,
                     what="Ready False, ScaledToZero")  # fmt: skip
            # a decision taken at zero with no demand: it stays (the wake query reads 0)
            stayed = wait_for(lambda: (o := status(cluster, namespace, "zero")) and "no demand" in
                              (o["status"]["autoscaling"].get("reason") or "") and o, timeout=20, what="a decision at zero")  # fmt: skip
            assert replicas(cluster, namespace, "zero") == 0 and stayed["status"]["autoscaling"]["desiredReplicas"] == 0

            woke = time.monotonic()
            front.set(3)  # three requests held at the front
            wait_for(lambda: replicas(cluster, namespace, "zero") == 1, timeout=30, what="one replica on the front's demand")
            print(f"\nscale to zero: idle -> 0 in {idle_for:.1f} s; demand -> 1 replica in {time.monotonic() - woke:.1f} s")

            def first_ready() -> dict[str, Any] | None:
                obj = status(cluster, namespace, "zero")
                wake = ((obj.get("status") or {}).get("autoscaling") or {}).get("scaledToZero", {}).get("lastWake") or {}
                return obj if "firstReadySeconds" in wake else None

            obj = wait_for(first_ready, timeout=60, what="the woken replica Ready, and status saying how long it took")
            wake = obj["status"]["autoscaling"]["scaledToZero"]["lastWake"]
            assert wake["by"] == "the wake query read 3" and wake["firstReadySeconds"] >= 8 - AUTOSCALE_SECONDS, wake
            assert cond(obj, "ScaledToZero")["status"] == "False"
            reasons = [e["reason"] for e in events(cluster, namespace, "zero")]
            assert "ScaledDown" in reasons and "ScaledUp" in reasons and "Idle" in reasons, reasons

        # maxPendingRequests is add-on 1.0's (coldStart.maxPendingRequests): the 0.15 CRD installed here refuses it,
        # and the service says so in the API server's words rather than dropping the bound
        apply(cluster, autoscaled(namespace, "zero", policy(), minReplicas=0, scaleToZero={"idleSeconds": 30},
                                  front={"kedaHttpAddOn": {"hosts": hosts, "maxPendingRequests": 20}}))  # fmt: skip
        refused = wait_for(lambda: (c := cond(status(cluster, namespace, "zero"), "SpecValid")).get("status") == "False" and c,
                           timeout=30, what="SpecValid=False for a route the add-on's CRD refuses")  # fmt: skip
        assert "InterceptorRoute" in refused["message"] and "coldStart" in refused["message"], refused
        print(f"add-on 0.15 and maxPendingRequests: {refused['message']}")


def test_the_cost_of_a_known_load_per_million_tokens_and_priced(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any, namespace: str, tmp_path: Path
) -> None:
    """status.cost on a known load: one replica of one GPU for a whole window holds window GPU-seconds; the stand-in
    exporters serve 40 requests/s of 64 tokens each, so the tokens are 64 per input and near 40 x 64 x window;
    the per-million figures and the price follow from them (the policy prices the product at 2.50 a GPU-hour)."""
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=40, mean_tokens=64)
    priced = policy(pricing={"currency": "USD", "gpuHour": {GPU_PRODUCT: "2.50"}})
    apply(cluster, autoscaled(namespace, "emb", priced, maxReplicas=1))
    with fleet(cluster, prometheus, namespace, "emb", load) as f:
        f.wait_targets(1, timeout=60)
        wait_for(lambda: metrics_flowing(cluster, namespace, "emb"), timeout=60, what="MetricsAvailable=True")
        started = time.time()

        def whole_window_with_traffic() -> dict[str, Any] | None:
            c = (status(cluster, namespace, "emb").get("status") or {}).get("cost") or {}
            end = parse_time(c.get("windowEnd"))
            return c if end is not None and end.timestamp() - COST_WINDOW_SECONDS >= started and c.get("inputs") else None

        cost = wait_for(whole_window_with_traffic, timeout=4 * COST_WINDOW_SECONDS + 20, what="the cost of a whole window of load")
        print(f"\nstatus.cost: {cost}")
        assert cost["window"] == f"{COST_WINDOW_SECONDS}s"
        assert parse_time(cost["windowEnd"]).timestamp() % COST_WINDOW_SECONDS == 0  # type: ignore[union-attr]
        assert cost["gpuSeconds"] == COST_WINDOW_SECONDS  # one pod of one GPU, the whole window
        assert cost["promptTokens"] / cost["inputs"] == pytest.approx(64, rel=0.02)
        assert cost["inputs"] == pytest.approx(40 * COST_WINDOW_SECONDS, rel=0.35)
        per_million = cost["gpuSeconds"] / (cost["promptTokens"] / 1e6)
        assert cost["gpuSecondsPerMillionTokens"] == pytest.approx(per_million, rel=1e-3)
        assert cost["gpuSecondsPerMillionInputs"] == pytest.approx(cost["gpuSeconds"] / (cost["inputs"] / 1e6), rel=1e-3)
        assert cost["pricePerMillionTokens"] == pytest.approx(2.5 * per_million / 3600, rel=1e-3)
        assert cost["currency"] == "USD"
        assert not f.failures
