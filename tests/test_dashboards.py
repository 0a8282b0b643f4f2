"""The chart's Grafana dashboards (dashboards/generate.py, grafana-foundation-sdk): the committed JSON is the
generator's output, every panel reads the dashboard's Prometheus variable, and every query reads series the
operator or vLLM export, by labels they have. On the real Prometheus scraping the real operator and vLLM's
exporters: e2e/tests/operator/test_alerts_live.py."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from pooling_operator.vllm import metrics as V
from tests.test_alerts import promtool, unknown_series

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from dashboards import generate  # noqa: E402  (a script folder, as argocd/)

VLLM = re.compile(r"\b(vllm:\w+)(?:\{([^}]*)\})?")


def docs() -> dict[str, dict[str, Any]]:
    return {name: json.loads(text) for name, text in generate.rendered().items()}


def test_the_committed_dashboards_are_the_generators_output() -> None:
    assert generate.main(["--check"]) == 0, "run `make dashboards`"


def test_every_panel_reads_the_dashboards_prometheus_and_every_query_a_series_that_exists() -> None:
    vllm_names = {m.name for m in V.METRICS} | {f"{m.name}_{s}" for m in V.METRICS if m.type == "histogram" for s in ("bucket", "sum", "count")}
    scope = set(V.SCOPE_LABELS)
    for name, doc in docs().items():
        assert doc["uid"].startswith("vpo-") and doc["templating"]["list"][0]["type"] == "datasource", name
        found = list(generate.queries(doc))
        assert found, name
        for title, expr in found:
            assert unknown_series(expr) == [], (name, title, expr)
            for metric, matchers in VLLM.findall(expr):
                assert metric in vllm_names, (name, title, metric)
                assert {label for label, _ in re.findall(r'(\w+)\s*=~?\s*"([^"]*)"', matchers)} <= scope, (name, title, matchers)
        panels = [p for p in doc["panels"] if p["type"] != "row"]
        assert all(p["datasource"]["uid"] == "${datasource}" for p in panels), name
        assert all(t["refId"] for p in panels for t in p["targets"]), name


def test_every_query_is_promql_prometheus_accepts(tmp_path: Path) -> None:
    """Each query, its variables set, as a recording rule that `promtool check rules` parses: a selector that exists
    inside an expression Prometheus refuses (a range over an aggregation) fails here, not in Grafana."""
    exprs = [e for doc in docs().values() for _, e in generate.queries(doc)]
    rules = [{"record": f"vpo:dashboard_query_{i}", "expr": substituted(e)} for i, e in enumerate(exprs)]
    path = tmp_path / "queries.yaml"
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def substituted(expr: str, namespace: str = "search", name: str = "minilm") -> str:
    """A dashboard query as Grafana sends it: the variables set, the rate interval a minute."""
    return expr.replace("$namespace", namespace).replace("$name", name).replace("$__rate_interval", "1m")
