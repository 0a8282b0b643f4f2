"""The closed loop's measuring half: a real Prometheus scraping the vLLM metric stand-ins of a Deployment's
ready pods (e2e/standin/exporters.py) through file-based discovery, and the kwok stage that holds back pods
while their "model loads".

The Deployments here are plain apps/v1 objects (no operator) with the operator's two selector labels.
Every wait polls with a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import datetime
import json
import math
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.harness.config import GPU_PRODUCT, GPU_PRODUCT_LABEL, GPU_RESOURCE
from e2e.harness.poll import wait_for
from e2e.kube.controlplane import REPO_ROOT, ControlPlane
from e2e.kube.prometheus import PrometheusError, PrometheusServer, PrometheusUnavailable, ensure_installed
from e2e.standin.exporters import (
    COMPONENT_LABEL,
    INSTANCE_LABEL,
    READY_AFTER_ANNOTATION,
    ExporterFleet,
    pod_ready,
    start_exporter,
    write_load,
    write_ready_pods,
)
from pooling_operator.vllm import metrics as m
from tests.unavailable import unavailable

CAPTURE = REPO_ROOT / "tests" / "data" / "vllm-captures" / "metrics-after-load.txt"
COMPONENT = "pooling-service"
WINDOW = "10s"
LOADING_SECONDS = 8  # the stand-in model load of the delayed pods


# ------------------------------------------------------------------------------------------ helpers


def _families(text: str) -> dict[str, Any]:
    """Metric families by the name the table uses (the parser drops a counter's ``_total``)."""
    return {
        (f"{f.name}_total" if f.type == "counter" else f.name): f
        for f in text_string_to_metric_families(text)
    }


def _label_names(family: Any) -> set[str]:
    return {name for s in family.samples for name in s.labels} - {"le"}


def _bounds(family: Any) -> list[float]:
    return [float(s.labels["le"]) for s in family.samples if s.name.endswith("_bucket")]


def _deployment(name: str, replicas: int, *, ready_after: str | None = None) -> dict[str, Any]:
    labels = {INSTANCE_LABEL: name, COMPONENT_LABEL: COMPONENT}
    template: dict[str, Any] = {"labels": labels}
    if ready_after:
        template["annotations"] = {READY_AFTER_ANNOTATION: ready_after}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": template,
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "registry.invalid/vllm:test",
                            "resources": {"limits": {GPU_RESOURCE: "1"}},
                        }
                    ],
                    "nodeSelector": {GPU_PRODUCT_LABEL: GPU_PRODUCT},
                    "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}],
                },
            },
        },
    }


def _create(cluster: ControlPlane, namespace: str, deployment: dict[str, Any]) -> None:
    assert cluster.api is not None
    status, body = cluster.api.request(
        "POST", f"/apis/apps/v1/namespaces/{namespace}/deployments", deployment
    )
    assert status == 201, body


def _scale(cluster: ControlPlane, namespace: str, name: str, replicas: int) -> None:
    assert cluster.api is not None
    status, body = cluster.api.request(
        "PATCH",
        f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
        {"spec": {"replicas": replicas}},
        content_type="application/merge-patch+json",
    )
    assert status == 200, body


def _pods(cluster: ControlPlane, namespace: str, name: str) -> list[dict[str, Any]]:
    assert cluster.api is not None
    return cluster.api.get(
        f"/api/v1/namespaces/{namespace}/pods",
        params={"labelSelector": f"{INSTANCE_LABEL}={name},{COMPONENT_LABEL}={COMPONENT}"},
    )["items"]


def _condition_time(pod: dict[str, Any], kind: str) -> datetime.datetime:
    for c in pod["status"]["conditions"]:
        if c["type"] == kind:
            return datetime.datetime.fromisoformat(c["lastTransitionTime"].replace("Z", "+00:00"))
    raise AssertionError(f"pod {pod['metadata']['name']} has no {kind} condition")


def _holds_until(deadline: float, check: Callable[[], Any], what: str) -> int:
    """Assert ``check`` at every poll until the monotonic ``deadline``; returns how many times it held."""
    rounds = 0
    while time.monotonic() < deadline:
        assert check(), f"{what} stopped holding after {rounds} checks"
        rounds += 1
        time.sleep(0.25)  # the poll period of an invariant, not a synchronisation
    return rounds


def _value(prometheus: PrometheusServer, promql: str) -> float:
    """The single value of a query that must answer; an empty answer fails the wait round."""
    value = prometheus.value(promql)
    assert value is not None, f"no data for {promql}"
    return value


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[PrometheusServer]:
    try:
        ensure_installed()
    except PrometheusUnavailable as exc:
        unavailable(f"no Prometheus: {exc}")
    server = PrometheusServer(tmp_path / "prometheus").start()
    try:
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------- one exporter, no cluster


def test_exporter_exports_vllms_names_types_labels_and_the_fixed_buckets(tmp_path: Path) -> None:
    """For every metric of the table: the name, TYPE and label names of a real vLLM's /metrics."""
    write_load(tmp_path / "load.json", requests_per_second=200)
    write_ready_pods(tmp_path / "pods.json", 1)
    exporter = start_exporter(
        tmp_path,
        "pod-0",
        model_name="minilm",
        load_file=tmp_path / "load.json",
        pods_file=tmp_path / "pods.json",
    )
    try:
        wait_for(exporter.poll_port, timeout=20, what="the exporter's port", alive=_alive(exporter))

        def answered() -> str | None:
            with urllib.request.urlopen(exporter.url, timeout=5) as resp:
                text = resp.read().decode()
            count = _families(text)[m.E2E_LATENCY]
            done = [s.value for s in count.samples if s.name == f"{m.E2E_LATENCY}_count"]
            return text if done and done[0] > 0 else None

        ours = _families(wait_for(answered, timeout=20, what="completed requests in /metrics"))
    finally:
        exporter.stop()
    real = _families(CAPTURE.read_text())

    for metric in m.METRICS:
        assert metric.name in real, f"{metric.name} is not in the capture"
        assert metric.name in ours, f"{metric.name} is not exported"
        assert ours[metric.name].type == real[metric.name].type == metric.type, metric.name
        assert _label_names(ours[metric.name]) == _label_names(real[metric.name]) == set(metric.labels)
        for s in ours[metric.name].samples:
            assert s.labels["engine"] == "0" and s.labels["model_name"] == "minilm", s
    reasons = {s.labels["finished_reason"] for s in ours[m.SUCCESS].samples}
    assert reasons == {s.labels["finished_reason"] for s in real[m.SUCCESS].samples}
    # the renderer's fixed latency buckets; vLLM's own defaults where the renderer changes nothing
    assert _bounds(ours[m.E2E_LATENCY]) == [*m.LATENCY_BUCKETS, math.inf]
    assert _bounds(ours[m.TTFT]) == _bounds(real[m.TTFT])
    assert _bounds(ours[m.ITERATION_TOKENS]) == _bounds(real[m.ITERATION_TOKENS])


def _alive(exporter: Any) -> Callable[[], None]:
    def check() -> None:
        if exporter.proc.poll() is not None:
            raise AssertionError(f"exporter exited with {exporter.proc.returncode}:\n{exporter.log_tail()}")

    return check


# ----------------------------------------------------------------- a Deployment, kwok and Prometheus


def test_prometheus_answers_every_autoscaler_query_from_the_ready_pods(
    cluster: ControlPlane, namespace: str, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=40, mean_tokens=16)
    _create(cluster, namespace, _deployment("minilm", 2))
    q = m.queries(namespace, "minilm", COMPONENT, WINDOW)
    with ExporterFleet(cluster, namespace, "minilm", COMPONENT, "minilm", prometheus, load) as fleet:
        fleet.wait_targets(2)
        wait_for(lambda: _value(prometheus, q.reporting) == 2, timeout=30, what="2 pods reporting")
        # a full window of samples: the two pods together complete the profile's 40 requests per second
        wait_for(
            lambda: abs(_value(prometheus, q.completions) - 40) < 10, timeout=30, what="~40 completions/s"
        )
        assert _value(prometheus, q.waiting) >= 0
        assert _value(prometheus, q.in_system) > 0
        assert _value(prometheus, q.tokens) > 0
        p99 = _value(prometheus, q.p99)
        assert math.isfinite(p99) and m.LATENCY_BUCKETS[0] <= p99 <= m.LATENCY_BUCKETS[-1], p99
        per_pod = prometheus.query(f'sum by (pod) (rate({m.SUCCESS}{{namespace="{namespace}"}}[{WINDOW}]))')
        assert sorted(labels["pod"] for labels, _ in per_pod) == sorted(fleet.targets())
        assert all(rate > 0 for _, rate in per_pod), per_pod

        # scaling down removes a target
        _scale(cluster, namespace, "minilm", 1)
        fleet.wait_targets(1)
        wait_for(lambda: _value(prometheus, q.reporting) == 1, timeout=30, what="1 pod reporting")

        # a Prometheus outage: queries fail; back on the same port and data, the data comes back
        prometheus.stop()
        with pytest.raises(PrometheusError):
            prometheus.query(q.reporting)
        prometheus.restart()
        wait_for(lambda: _value(prometheus, q.reporting) == 1, timeout=30, what="reporting after the restart")
        assert fleet.failures == []


def test_loading_pod_is_not_ready_not_reporting_and_gets_no_load_until_its_delay_passed(
    cluster: ControlPlane, namespace: str, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=20)
    _create(cluster, namespace, _deployment("slow", 1, ready_after=f"{LOADING_SECONDS}s"))
    q = m.queries(namespace, "slow", COMPONENT, WINDOW)
    with ExporterFleet(cluster, namespace, "slow", COMPONENT, "slow", prometheus, load) as fleet:
        (first,) = fleet.wait_targets(1, timeout=LOADING_SECONDS + 30)
        wait_for(lambda: _value(prometheus, q.reporting) == 1, timeout=30, what="1 pod reporting")

        _scale(cluster, namespace, "slow", 2)

        def scheduled_new_pod() -> dict[str, Any] | None:
            new = [p for p in _pods(cluster, namespace, "slow") if p["metadata"]["name"] != first]
            return new[0] if new and new[0]["spec"].get("nodeName") else None

        pod = wait_for(scheduled_new_pod, timeout=30, what="the new pod scheduled")
        name = pod["metadata"]["name"]
        seen = time.monotonic()

        def loading() -> bool:
            (now,) = [p for p in _pods(cluster, namespace, "slow") if p["metadata"]["name"] == name]
            assert not pod_ready(now), f"{name} Ready before its {LOADING_SECONDS}s load"
            assert now["status"].get("phase") == "Pending", now["status"]
            assert set(fleet.targets()) == {first}
            assert json.loads(fleet.pods_file.read_text()) == {"ready_pods": 1}  # all the load on the first
            assert _value(prometheus, q.reporting) == 1
            return True

        rounds = _holds_until(seen + LOADING_SECONDS - 2, loading, f"{name} loading")
        assert rounds > 5

        ready = wait_for(
            lambda: next(
                (
                    p
                    for p in _pods(cluster, namespace, "slow")
                    if p["metadata"]["name"] == name and pod_ready(p)
                ),
                None,
            ),
            timeout=30,
            what=f"{name} Ready after loading",
        )
        waited = (_condition_time(ready, "Ready") - _condition_time(ready, "PodScheduled")).total_seconds()
        assert waited >= LOADING_SECONDS - 1, f"Ready {waited:.0f}s after being scheduled"
        assert ready["metadata"]["annotations"].get("vllm-pooling.io/e2e-loaded")
        fleet.wait_targets(2)
        wait_for(lambda: _value(prometheus, q.reporting) == 2, timeout=30, what="2 pods reporting")
        assert json.loads(fleet.pods_file.read_text()) == {"ready_pods": 2}
        assert fleet.failures == []
