"""The chart's alert rules and dashboards against the real Prometheus scraping the real operator and the vLLM
stand-in exporters (issue 44): every series each rule (charts/vllm-pooling-operator/files/alerts.yaml) and each
dashboard query (dashboards/generate.py) reads, each vector selector of its expression, returns at least one
series, so a misspelt metric, label or label value fails here. The resources are the ones that make
the operator publish each family: an autoscaled service under load from the vLLM stand-in exporters (conditions,
replicas and bounds, observed and target p99, start-up), a PoolingJob whose shards report (samples, bytes against
its budget), and a ModelCache. promtool's own tests of when each alert fires: tests/test_alerts.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from e2e.harness.config import GPU_PRODUCT
from e2e.harness.poll import wait_for
from e2e.kube import build
from e2e.kube.controlplane import ControlPlane
from e2e.kube.prometheus import PrometheusServer
from e2e.operator_process import OperatorProcess
from e2e.standin.exporters import write_load
from e2e.tests.operator.test_autoscaling import autoscaled, fleet, metrics_flowing, policy, prometheus  # noqa: F401
from e2e.tests.operator.test_hidden_states import claims
from e2e.tests.operator.test_services import apply
from e2e.tests.test_chart import CHART, KUBE
from tests.factories import model_cache, pooling_job
from tests.test_alerts import SELECTOR, rules
from tests.test_dashboards import VLLM, generate, substituted


def selectors(namespace: str) -> set[str]:
    """Every vector selector of every alert rule and every dashboard query, the dashboards' variables set to the
    test's service (namespace, emb) and the rate interval to a minute."""
    return {f"{name}{{{matchers}}}" if matchers else name for e in expressions(namespace) for pattern in (SELECTOR, VLLM)
            for name, matchers in pattern.findall(e)}  # fmt: skip


def expressions(namespace: str) -> list[str]:
    """Every alert rule's expression and every dashboard query, as Grafana sends it for the test's service."""
    queries = [e for doc in dashboards() for _, e in generate.queries(doc)]
    return [r["expr"] for r in rules()] + [substituted(e, namespace, "emb") for e in queries]


def dashboards() -> list[dict[str, object]]:
    return [json.loads(text) for text in generate.rendered().values()]


def test_every_series_the_alert_rules_and_dashboards_read_is_scraped(
    cluster: ControlPlane, operator: OperatorProcess, prometheus: PrometheusServer, policy: object, namespace: str, tmp_path: Path,  # noqa: F811 (the fixtures imported above)
) -> None:
    prometheus.write_targets(prometheus.targets_path("operator"), [{"targets": [f"127.0.0.1:{operator.metrics_port}"]}])
    load = tmp_path / "load.json"
    write_load(load, requests_per_second=40)
    apply(cluster, autoscaled(namespace, "emb", policy()))  # type: ignore[operator]
    claims(cluster, namespace)
    apply(cluster, model_cache({"storage": {"size": "2Gi"}}, namespace=namespace))
    job = pooling_job({"dataset": {"volume": {"claimName": "datasets", "path": "/corpus.jsonl"}},
                       "output": {"volume": {"claimName": "hidden-states", "path": "/runs/v1"}, "storageBudget": "1Gi"},
                       "resources": {"gpu": {"count": 1, "product": GPU_PRODUCT}}}, name="corpus", namespace=namespace)  # fmt: skip
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(job))
    queued = pooling_job({**{k: job["spec"][k] for k in ("dataset", "output", "resources")}, "queue": {"name": "team-a"}},
                         name="queued", namespace=namespace)  # its Queued condition: no Kueue here, it waits
    cluster.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(queued))
    with fleet(cluster, prometheus, namespace, "emb", load) as f:
        f.wait_targets(1, timeout=60)
        wait_for(lambda: metrics_flowing(cluster, namespace, "emb"), timeout=60, what="MetricsAvailable=True")
        # what the shards would report (the drivers' writes are tested in tests/test_pooling_driver*)
        report = {f"shard-{i}": json.dumps({"state": "running", "done": 10, "failed": 0, "bytes": 15360, "total": 40,
                                            "lines": 80, "hiddenSize": 384, "valueBytes": 4}) for i in range(2)}  # fmt: skip
        wait_for(lambda: cluster.kubectl("get", "configmap/corpus-progress", "-n", namespace, check=False).returncode == 0,
                 timeout=30, what="the PoolingJob's progress ConfigMap")
        cluster.kubectl("patch", "configmap/corpus-progress", "-n", namespace, "--type=merge", "-p", json.dumps({"data": report}))

        def missing() -> list[str]:
            return sorted(s for s in selectors(namespace) if not prometheus.query(s))

        left: list[str] = []

        def all_scraped() -> bool:
            left[:] = missing()
            return not left

        try:
            wait_for(all_scraped, timeout=60, what="every series the alert rules and dashboards read")
        except BaseException as exc:
            raise AssertionError(f"not scraped from the operator: {left}") from exc
        for expr in expressions(namespace):  # and each whole expression is one Prometheus evaluates
            prometheus.query(expr)


def test_the_charts_prometheus_rule_is_admitted_by_the_api_server(cluster: ControlPlane, namespace: str) -> None:
    """prometheus-operator's PrometheusRule CRD (e2e/kube/crds.py) admits what the chart renders with alerts on."""
    rendered = subprocess.run([str(build.tool("helm")), "template", "vpo", str(CHART), "-n", namespace, "--kube-version", KUBE,
                               "--set", "alerts.enabled=true", "--show-only", "templates/prometheusrule.yaml"],
                              capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    out = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-f", "-", input=rendered).stdout
    assert "prometheusrule.monitoring.coreos.com/vpo-vllm-pooling-operator serverside-applied (server dry run)" in out, out
