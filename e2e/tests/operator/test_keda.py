"""Real KEDA v2.20.2 (its operator and metrics adapter, e2e/kube/keda.py) scaling a ``backend: keda`` service that the
operator rendered, on the real API server and a real Prometheus, with the stand-in exporters as its pods' metrics;
then the same load step through ``simulate``'s ``keda`` baseline, told the cluster's HPA sync period.

The controllers are built by ``make test`` in the background (e2e/kube/build.py, ``CONTROLLERS``); this module waits for
that build with a deadline. It needs a network namespace of its own (root): elsewhere it is skipped with the
reason, except under ``CI=true``, where that fails the run.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from e2e.harness import netns
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.keda import HPA_SYNC_SECONDS, Keda
from e2e.kube.prometheus import PrometheusServer
from e2e.kube.thirdparty import start_controller
from e2e.operator_process import OperatorProcess
from e2e.standin.exporters import write_load
from e2e.tests.operator.test_autoscaling import (  # noqa: F401 - fixtures
    REACTION_AFTER_VISIBLE,
    SCRAPE_SECONDS,
    autoscaled,
    fleet,
    policy,
    prometheus,
    replicas,
    step_visible_at,
)
from e2e.tests.operator.test_services import apply, get
from pooling_operator.api import PoolingService
from pooling_operator.api.policy import AutoscalingPolicySpec
from pooling_operator.autoscaling.simulator.baselines import keda as keda_baseline
from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams
from pooling_operator.autoscaling.simulator.simulate import run, setup_for
from pooling_operator.autoscaling.simulator.trace import Segment, Trace
from pooling_operator.builders.services import KEDA_POLLING_SECONDS, scaled_object

pytestmark = pytest.mark.controllers

# make test starts the controllers' build when the control plane is built; a cold one takes minutes on two
# cores at low priority beside the tiers (the figure is printed at the end of make test)
READY_AFTER_SECONDS = 8.0  # autoscaled(): the kwok stage holds a new pod back this long, as model loading does
LOW_RPS, STEP_RPS = 40.0, 300.0
STEP_SECONDS = 40.0  # how long the step is held: long enough for two HPA syncs after the new pods are ready
MAX_REPLICAS = 12
# down in steps of five: the way back to one (the scale-down window, then one step per 15 s period) takes two
# periods instead of nine, for real KEDA, the operator and the simulation alike
SCALE_DOWN = {"stabilizationSeconds": 10, "maxStep": 5}


@pytest.fixture(scope="module")
def keda(cluster: ControlPlane, crds: list[str]) -> Iterator[Keda]:
    k = start_controller("KEDA", netns.available(), lambda binaries: Keda(cluster, binaries).start(),
                         lambda k: f"operator and adapter up, APIService Available in {k.started_seconds:.1f} s")
    yield k
    k.stop()


class ReplicaSampler:
    """The Deployment's spec.replicas every 0.2 s in a thread, with the monotonic time of each sample."""

    def __init__(self, cluster: ControlPlane, namespace: str, name: str) -> None:
        self.cluster, self.namespace, self.name = cluster, namespace, name
        self.samples: list[tuple[float, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ReplicaSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        deadline = time.monotonic() + 600  # bounded even when a failing test never leaves the block
        while not self._done.wait(0.2) and time.monotonic() < deadline:
            try:
                self.samples.append((time.monotonic(), replicas(self.cluster, self.namespace, self.name)))
            except Exception:  # a GET that failed is a missed sample
                continue

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join(timeout=5)

    def first_above(self, since: float, n: int) -> float | None:
        return next((t - since for t, r in self.samples if t >= since and r > n), None)

    def peak(self, since: float, until: float) -> int:
        return max((r for t, r in self.samples if since <= t <= until), default=0)


def simulated(doc: dict[str, Any], policy_spec: dict[str, Any], low_seconds: float, step_seconds: float,
              seed: int, startup_s: float = READY_AFTER_SECONDS) -> tuple[float | None, int, float | None]:
    """The same service, policy and load step through simulate's keda baseline: (seconds from the step to the
    first scale-up, the peak replicas while the step lasts, seconds from the end of the step to one replica).
    ``startup_s``: a new replica's creation to its first scrape, as the real run measured it (``Step.startup``)."""
    resource = PoolingService.model_validate(doc)
    pol = AutoscalingPolicySpec.model_validate(policy_spec)
    params = replace(ServiceParams(), startup_s=startup_s)
    setup = setup_for(resource, pol, params, seed=seed, scrape_interval=SCRAPE_SECONDS, initial_replicas=1)
    trace = Trace((Segment(0.0, LOW_RPS, 16), Segment(low_seconds, STEP_RPS, 16),
                   Segment(low_seconds + step_seconds, 0.0, 16)), low_seconds + step_seconds + 180)
    result = run(setup, trace, keda_baseline(scaled_object(resource, pol), setup.queries, HPA_SYNC_SECONDS))
    end = low_seconds + step_seconds
    first = next((e.t - low_seconds for e in result.timeline if e.t >= low_seconds and e.replicas > 1), None)
    peak = max((e.replicas for e in result.timeline if low_seconds <= e.t <= end), default=0)
    down = next((e.t - end for e in result.timeline if e.t >= end and e.replicas == 1), None)
    return first, peak, down


@dataclass(frozen=True)
class Step:
    first_up: float  # seconds from the step to the first scale write
    peak: int  # the most replicas set while the step lasted
    down: float  # seconds from the end of the step to one replica
    startup: tuple[float, float]  # a new replica's creation to Ready as the fleet saw it, and to its target
    # written for Prometheus (medians): the start-up the real run had lies between the two
    visible: float  # seconds from the step to its first scrape in Prometheus (test_autoscaling.step_visible_at)


def load_step(cluster: ControlPlane, prometheus: PrometheusServer, namespace: str, doc: dict[str, Any], load: Path,  # noqa: F811
              before: Callable[[], None] = lambda: None) -> Step:
    """Apply ``doc``; at one replica and LOW_RPS, ``before()``; then STEP_RPS for STEP_SECONDS, then nothing until
    the Deployment is back at one replica. Replicas are sampled throughout."""
    write_load(load, requests_per_second=LOW_RPS)
    apply(cluster, doc)
    with fleet(cluster, prometheus, namespace, "emb", load) as f, ReplicaSampler(cluster, namespace, "emb") as s:
        f.wait_targets(1, timeout=60)
        before()
        wait_for(lambda: replicas(cluster, namespace, "emb") == 1, timeout=30, what="one replica at the low load")
        low_until, step_wall = time.monotonic(), time.time()
        write_load(load, requests_per_second=STEP_RPS)
        wait_for(lambda: replicas(cluster, namespace, "emb") > 1, timeout=90, what="the scale-up", interval=0.2,
                 max_interval=0.2)
        visible = wait_for(lambda: step_visible_at(prometheus, namespace, "emb", step_wall), timeout=10,
                           what="the step in Prometheus")
        step_end = low_until + STEP_SECONDS
        wait_for(lambda: time.monotonic() >= step_end, timeout=STEP_SECONDS + 5, what="the end of the load step")
        write_load(load, requests_per_second=0)
        wait_for(lambda: replicas(cluster, namespace, "emb") == 1, timeout=240, what="the scale-down to one",
                 interval=0.5, max_interval=0.5)
        down = time.monotonic()
        assert not f.failures
        # the replicas the step added: the kwok stage's READY_AFTER_SECONDS plus what this machine adds; on a
        # loaded machine that is seconds more, a later replica lets the backlog (and so KEDA's answer) grow, and
        # the simulation is told the start-up the real run had, as two bounds: Ready as the fleet saw it (the
        # load spreads over the pod) and its target written (its series can be scraped)
        first_pod = min(f.created_at.values())
        bounds = [[secs for pod, secs in f.startups(until).items() if f.created_at[pod] > first_pod]
                  for until in ("ready", "published")]
    first = s.first_above(low_until, 1)
    assert first is not None and all(bounds)
    return Step(first, s.peak(low_until, step_end), down - step_end,
                (statistics.median(bounds[0]), statistics.median(bounds[1])), visible)


def test_real_keda_scales_up_on_a_load_step_and_back_down_as_the_keda_baseline_says(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any,  # noqa: F811
    keda: Keda, namespace: str, tmp_path: Path,
) -> None:
    name = policy()
    # a ceiling above what the step needs (two replicas' worth), so that the peak is KEDA's own answer
    doc = autoscaled(namespace, "emb", name, backend="keda", maxReplicas=MAX_REPLICAS, scaleDown=SCALE_DOWN)
    hpa_path = f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/keda-hpa-emb"

    def before() -> None:
        hpa = wait_for(lambda: get(cluster, hpa_path), timeout=90, what="the HPA KEDA makes for the ScaledObject")
        assert hpa["spec"]["scaleTargetRef"]["name"] == "emb" and hpa["spec"]["minReplicas"] == 1
        # the adapter answers through the API server: the aggregated API, the netns hop, KEDA's gRPC
        metric = hpa["spec"]["metrics"][0]["external"]["metric"]["name"]
        values = wait_for(lambda: keda.external_metric(namespace, metric, "emb"), timeout=90,
                          what=f"the external metric {metric} through external.metrics.k8s.io")
        print(f"\nexternal metric {metric} at {LOW_RPS:g} req/s: {values[0]['value']}")

    real = load_step(cluster, prometheus, namespace, doc, tmp_path / "load.json", before)
    # the simulation at both bounds of the start-up the real run had (Step.startup), five seeds each: the real
    # run's figures must lie within what the simulation gives over that span, give or take one replica or one
    # polling and sync period (the peak jumps by two replicas between start-ups of 10 and 12 s here)
    sims = [simulated(doc, {"prometheus": {"url": prometheus.url, "timeout": "2s"}}, 60.0, STEP_SECONDS, seed, startup)
            for startup in real.startup for seed in range(5)]
    print(f"\nreal KEDA, {LOW_RPS:g} -> {STEP_RPS:g} req/s for {STEP_SECONDS:g} s: first scale-up {real.first_up:.1f} s, "
          f"peak {real.peak} replicas, load end -> back to one {real.down:.1f} s; a new replica Ready "
          f"{real.startup[0]:.1f} s and scraped {real.startup[1]:.1f} s after its creation (medians)")
    for i, (first, peak, back) in enumerate(sims):
        print(f"keda baseline (start-up {real.startup[i // 5]:.1f} s, seed {i % 5}): first scale-up {first} s, peak {peak}, "
              f"back to one {back} s")
    slack = KEDA_POLLING_SECONDS + HPA_SYNC_SECONDS
    firsts, peaks, backs = ([x[i] for x in sims] for i in range(3))
    assert None not in firsts and None not in backs, sims
    assert min(firsts) - slack <= real.first_up <= max(firsts) + slack, (firsts, real.first_up, slack)
    assert min(peaks) - 1 <= real.peak <= max(peaks) + 1, (peaks, real.peak)
    # and the way down: the scale-down window, then one step per period of the rendered behaviour
    assert min(backs) - slack <= real.down <= max(backs) + slack, (backs, real.down, slack)


def test_the_operator_backend_takes_the_same_step_with_the_replicas_it_needs(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: Any,  # noqa: F811
    namespace: str, tmp_path: Path,
) -> None:
    """The same service and step with ``backend: operator``: it learns a replica's capacity while requests wait,
    so it asks for what the step needs, where KEDA (above) follows the backlog to several times that."""
    name = policy()
    doc = autoscaled(namespace, "emb", name, maxReplicas=MAX_REPLICAS, scaleDown=SCALE_DOWN)
    ours = load_step(cluster, prometheus, namespace, doc, tmp_path / "load.json")
    as_keda = autoscaled(namespace, "emb", name, backend="keda", maxReplicas=MAX_REPLICAS, scaleDown=SCALE_DOWN)
    # KEDA's peaks at the lower bound of the start-up this run had: the smaller, so the stricter comparison
    keda_peaks = [simulated(as_keda, {"prometheus": {"url": prometheus.url, "timeout": "2s"}}, 60.0, STEP_SECONDS, seed,
                            ours.startup[0])[1] for seed in range(5)]
    print(f"\noperator backend, {LOW_RPS:g} -> {STEP_RPS:g} req/s for {STEP_SECONDS:g} s: first scale-up "
          f"{ours.first_up:.1f} s, peak {ours.peak} replicas, back to one {ours.down:.1f} s; "
          f"the keda baseline (matched to real KEDA above) peaks at {keda_peaks}")
    # from the step in Prometheus: a decision period, the scale write and this poll (test_autoscaling's bound)
    assert ours.first_up - ours.visible <= REACTION_AFTER_VISIBLE, (ours.visible, ours.first_up)
    assert ours.peak < min(keda_peaks), (ours.peak, keda_peaks)
