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
from tests.test_alerts import unknown_series

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
