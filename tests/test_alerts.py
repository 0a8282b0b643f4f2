"""The chart's alert rules (charts/vllm-pooling-operator/files/alerts.yaml): valid for Prometheus (promtool check
rules), each firing on what means it and quiet on its near misses (promtool test rules, tests/alerts/), each with
a runbook section in docs/alerts.md, and reading only series the operator exports, by the labels it gives them.
On the real Prometheus scraping the real operator: e2e/tests/operator/test_alerts_live.py."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import REGISTRY

import pooling_operator.autoscaling.loop
import pooling_operator.reconcile
import pooling_operator.runtime.core  # noqa: F401  (the modules that define the operator's series)
from pooling_operator.status.series import FAMILIES, OBJECT_LABELS
from tests.unavailable import unavailable

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "charts" / "vllm-pooling-operator" / "files" / "alerts.yaml"
TESTS = ROOT / "tests" / "alerts" / "alerts_test.yaml"
RUNBOOKS = ROOT / "docs" / "alerts.md"
SELECTOR = re.compile(r"\b(vllm_pooling_operator_\w+)(?:\{([^}]*)\})?")


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        unavailable("no promtool: Debian's prometheus package ships it (apt-get install prometheus)")
    return subprocess.run([tool, *args], capture_output=True, text=True, cwd=TESTS.parent, timeout=60)


def test_promtool_checks_the_rules_and_every_alert_fires_on_what_means_it() -> None:
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = promtool("test", "rules", TESTS.name)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    fired = {a["alertname"] for t in yaml.safe_load(TESTS.read_text())["tests"] for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert fired == {r["alert"] for r in rules()}, "every alert needs a case where it fires"


def test_every_alert_has_a_runbook_section_its_annotation_points_at() -> None:
    text = RUNBOOKS.read_text()
    for r in rules():
        assert f"\n## {r['alert']}\n" in text, f"docs/alerts.md has no section for {r['alert']}"
        assert r["annotations"]["runbook_url"] == f"@RUNBOOK@#{r['alert'].lower()}"
        for part in ("**Means**", "**Look at**", "**Do**"):
            section = text.split(f"\n## {r['alert']}\n", 1)[1].split("\n## ", 1)[0]
            assert part in section, f"{r['alert']}: its runbook says nothing under {part}"


def exported() -> dict[str, set[str]]:
    """Every operator series name as scraped (a counter's with _total) and its label names."""
    out: dict[str, set[str]] = {}
    for metric in REGISTRY.collect():
        if not metric.name.startswith("vllm_pooling_operator_"):
            continue
        names = {"counter": [f"{metric.name}_total"], "histogram": [f"{metric.name}_bucket", f"{metric.name}_sum",
                 f"{metric.name}_count"]}.get(metric.type, [metric.name])  # fmt: skip
        for name in names:
            out[name] = set()
    for f in FAMILIES:
        out[f.name] = {*OBJECT_LABELS, f.label}
    return out


def unknown_series(expr: str) -> list[str]:
    """What `expr` reads that the operator does not export: a series name, a label of one of the per-resource
    families, or a value of a family's own label (each alternative of a =~ "a|b")."""
    known, families, wrong = exported(), {f.name: f for f in FAMILIES}, []
    for name, matchers in SELECTOR.findall(expr):
        if name not in known:
            wrong.append(name)
            continue
        for label, value in re.findall(r'(\w+)\s*=~?\s*"([^"]*)"', matchers):
            if name in families and label not in known[name]:
                wrong.append(f"{name}{{{label}}}")
            elif name in families and label == families[name].label:
                wrong += [f"{name}{{{label}={v!r}}}" for v in value.split("|") if v not in families[name].values]
    return wrong


def test_the_rules_read_only_series_the_operator_exports_and_labels_it_gives_them() -> None:
    for r in rules():
        assert unknown_series(r["expr"]) == [], r["alert"]
    assert unknown_series('vllm_pooling_operator_condition{type="Redy"} + vllm_pooling_operator_leadr') == [
        "vllm_pooling_operator_condition{type='Redy'}", "vllm_pooling_operator_leadr"]
