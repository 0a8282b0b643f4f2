"""A PoolingService on all-MiniLM-L6-v2 from a model volume, served by real vLLM 0.32 through the pod runner.

One server for the module (a start costs minutes): what it computes, which routes answer with and without
the API key, the metrics it exports, and a real Prometheus scraping it feeding the autoscaler's queries.
"""

from __future__ import annotations

import concurrent.futures
import math
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.harness.poll import wait_for
from e2e.kube.controlplane import ControlPlane
from e2e.kube.prometheus import PrometheusServer, PrometheusUnavailable
from e2e.operator_process import OperatorProcess
from e2e.podrunner.runner_process import PodRunner, eager
from e2e.realvllm import runtime
from e2e.standin import exporter as standin
from e2e.tests.operator.real_vllm.conftest import Deployer, Served, oracle
from e2e.tests.operator.real_vllm.pool import slot
from e2e.tests.operator.real_vllm.routes import PROBES, answered, probe
from pooling_operator.autoscaling.simulator.servicemodel import ServiceParams
from pooling_operator.vllm import metrics as m
from tests.unavailable import unavailable

pytestmark = [pytest.mark.real_vllm, pytest.mark.timeout(1500)]

SENTENCES = [
    "A man is eating food.",
    "A man is riding a white horse on an enclosed ground.",
    "Kubernetes schedules pods onto nodes.",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map text to vectors.",
    "",
]
KEY = "s3cret-" + uuid.uuid4().hex[:8]
COMPONENT = "pooling-service"


def minilm(namespace: str, policy: str) -> dict[str, Any]:
    return {
        "apiVersion": "vllm-pooling.io/v1alpha1",
        "kind": "PoolingService",
        "metadata": {"name": "minilm", "namespace": namespace},
        "spec": {
            "model": {
                "name": runtime.MINILM.repo_id,
                "source": {"volume": {"claimName": "models", "path": f"/{runtime.MINILM.key}", "readOnly": True}},
            },
            "task": "embed",
            "pooling": {"type": "MEAN", "normalize": True},
            "engine": eager({"image": "vllm/vllm-openai:v0.32.0", "dtype": "float32", "maxModelLen": 256}),
            "resources": {"gpu": {"count": 0}, "cpu": "1", "memory": "4Gi"},
            "service": {"apiKeySecretRef": {"name": "minilm-key", "key": "key"}},
            # one replica at most (one machine); the autoscaler still reads and reports the real metrics
            "autoscaling": {"minReplicas": 1, "maxReplicas": 1, "window": "10s", "p99Latency": "250ms",
                            "policyRef": {"name": policy}},
        },
    }  # fmt: skip


POOL = [slot("test_embeddings' own MiniLM server")]  # the server pool starts the next modules' servers beside it



@pytest.fixture(scope="module")
def prometheus(cluster: ControlPlane) -> Iterator[PrometheusServer]:
    try:
        server = PrometheusServer(Path(cluster.run_dir) / "prometheus-real-vllm", scrape_interval="1s").start()
    except PrometheusUnavailable as exc:
        unavailable(f"no Prometheus: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def served(
    cluster: ControlPlane, operator: OperatorProcess, pod_runner: PodRunner, module_namespace: str,
    prometheus: PrometheusServer,
) -> Iterator[Served]:  # fmt: skip
    ns = module_namespace
    policy = f"real-vllm-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("apply", "-f", "-", input=(
        f"apiVersion: vllm-pooling.io/v1alpha1\nkind: AutoscalingPolicy\nmetadata: {{name: {policy}}}\n"
        f"spec: {{prometheus: {{url: '{prometheus.url}', timeout: 2s}}}}\n"
    ))  # fmt: skip
    cluster.kubectl("create", "secret", "generic", "minilm-key", "-n", ns, f"--from-literal=key={KEY}")
    d = Deployer(cluster, pod_runner)
    try:
        s = d.serve(minilm(ns, policy))
        # Prometheus scrapes the real process with the labels the operator's PodMonitor relabels into
        prometheus.write_targets(
            prometheus.targets_path("minilm"),
            [{"targets": [s.url.removeprefix("http://")], "labels": m.target_labels(ns, "minilm", COMPONENT, s.pod)}],
        )
        yield s
    finally:
        d.close()
        cluster.kubectl("delete", "autoscalingpolicy", policy, "--wait=false", check=False)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def embed(served: Served, texts: list[str], key: str | None = KEY) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.post(f"{served.url}/v1/embeddings", json={"model": "minilm", "input": texts}, headers=headers, timeout=120)


def test_only_the_model_path_and_port_were_rewritten(served: Served, vllm_runtime: runtime.Runtime) -> None:
    rewrites = [r for r in served.plan["rewrites"] if not r.startswith("env ")]
    assert rewrites == [
        f"args[0]: /models/{runtime.MINILM.key} -> {vllm_runtime.root / 'models' / runtime.MINILM.key}",
        f"args[6]: 8000 -> {served.plan['ports']['http']['local']}",
    ], rewrites
    assert served.plan["argv"][served.plan["argv"].index("--dtype") + 1] == "float32"


def test_embeddings_equal_sentence_transformers(served: Served, vllm_runtime: runtime.Runtime) -> None:
    r = embed(served, SENTENCES)
    assert r.status_code == 200, r.text
    got = [d["embedding"] for d in sorted(r.json()["data"], key=lambda d: d["index"])]
    want = oracle(vllm_runtime, "embed", str(vllm_runtime.model_dir(runtime.MINILM)), {"sentences": SENTENCES})["vectors"]
    assert len(got) == len(want) == len(SENTENCES)
    for text, g, w in zip(SENTENCES, got, want, strict=True):
        assert len(g) == 384
        assert cosine(g, w) >= 0.9999, (text, cosine(g, w))
        assert abs(math.sqrt(sum(x * x for x in g)) - 1) < 1e-4  # normalize: true


def test_status_routes_answer_and_the_key_guards_what_status_says(served: Served) -> None:
    routes = served.status["routes"]
    for route in routes:
        resp = probe(served.url, route, "minilm", KEY)
        assert resp.status_code == 200, (route, resp.status_code, resp.text[:300])
    for route in ("/classify", "/generative_scoring", "/v1/completions", "/v1/chat/completions"):
        assert route not in routes
        assert probe(served.url, route, "minilm", KEY).status_code == 404, route
    # without the key /v1/* refuses, and status.unprotectedRoutes lists exactly what still answers
    assert embed(served, ["hello"], key=None).status_code == 401
    open_without_key = sorted(r for r in PROBES if answered(probe(served.url, r, "minilm")))
    assert sorted(served.status["unprotectedRoutes"]) == open_without_key


def family(metric: m.Metric) -> str:
    """The family name in the text format: a counter's drops ``_total`` (a histogram's name keeps it)."""
    return metric.name.removesuffix("_total") if metric.type == "counter" else metric.name


def _shape(exposition: str) -> dict[str, tuple[str, frozenset[str], tuple[str, ...]]]:
    """family -> (type, label names, bucket bounds) for the families the table names."""
    wanted = {family(mt) for mt in m.METRICS}
    out = {}
    for fam in text_string_to_metric_families(exposition):
        if fam.name not in wanted:
            continue
        labels = frozenset(k for s in fam.samples for k in s.labels if k != "le")
        bounds = tuple(dict.fromkeys(s.labels["le"] for s in fam.samples if s.name.endswith("_bucket")))
        out[fam.name] = (fam.type, labels, bounds)
    return out


def test_real_metrics_have_every_name_label_and_bucket_the_table_assumes(served: Served) -> None:
    assert embed(served, ["warm"]).status_code == 200
    real = _shape(httpx.get(f"{served.url}/metrics", timeout=30).text)
    for metric in m.METRICS:
        fam = family(metric)
        assert fam in real, f"{metric.name} missing from the real /metrics"
        typ, labels, bounds = real[fam]
        assert typ == metric.type, (metric.name, typ)
        assert set(metric.labels) <= labels, (metric.name, sorted(labels))
        if metric.type == "histogram":
            assert [float(b) for b in bounds] == [*standin.BUCKETS[metric.name], math.inf], metric.name
    assert [float(b) for b in real[m.E2E_LATENCY][2]][:-1] == list(m.LATENCY_BUCKETS)
    # the test exporters export the same shape (one table, shared by both)
    model = standin.Model(ServiceParams(), seed=1)
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry()
    reg.register(standin.VllmCollector(model, "minilm"))
    assert _shape(generate_latest(reg).decode()) == real


def test_prometheus_scraping_the_real_server_feeds_the_autoscaler(
    served: Served, prometheus: PrometheusServer, cluster: ControlPlane
) -> None:
    q = m.queries(served.namespace, "minilm", COMPONENT, "30s")
    values: dict[str, float] = {}
    stop = threading.Event()
    sent: list[int] = []

    def load(worker: int) -> None:  # steady traffic while we wait for the scrapes and the decisions
        i = 0
        while not stop.is_set():
            r = embed(served, [f"sentence {worker} {i} " * (1 + i % 7)])
            sent.append(r.status_code)
            i += 1

    pool = concurrent.futures.ThreadPoolExecutor(4)
    for w in range(4):
        pool.submit(load, w)
    try:
        _wait_for_queries_and_status(served, prometheus, cluster, q, values)
    finally:
        stop.set()
        pool.shutdown(wait=True)
    assert sent and set(sent) == {200}


def _wait_for_queries_and_status(
    served: Served, prometheus: PrometheusServer, cluster: ControlPlane, q: m.Queries, values: dict[str, float]
) -> None:

    def answered_all() -> bool:
        for name, promql in q.named().items():
            v = prometheus.value(promql)
            if v is None or math.isnan(v):
                return False
            values[name] = v
        return values["completions"] > 0

    wait_for(answered_all, timeout=60, what=f"data for every autoscaler query ({q.named()})")
    assert values["reporting"] == 1
    assert 0.001 < values["p99"] < 30, values  # from the fixed buckets: a finite quantile, in seconds

    def reported() -> dict[str, Any] | None:
        obj = yaml_get(cluster, served.namespace, "minilm")
        a = (obj.get("status") or {}).get("autoscaling") or {}
        conds = {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}
        ok = conds.get("MetricsAvailable", {}).get("status") == "True" and a.get("p99LatencySeconds")
        return a if ok else None

    a = wait_for(reported, timeout=90, what="the autoscaler reporting the real p99")
    assert 0.001 < a["p99LatencySeconds"] < 30, a


def yaml_get(cluster: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    import json

    return json.loads(cluster.kubectl("get", "poolingservice", name, "-n", namespace, "-o", "json").stdout)
