"""The one source of the chart's Grafana dashboards: four dashboards as code (grafana-foundation-sdk), written as
JSON into charts/vllm-pooling-operator/files/dashboards/ (`make dashboards`); tests/test_dashboards.py fails when a
committed file differs, or when a query reads a series nobody exports, and the operator tier evaluates every
query's series on the real Prometheus scraping the real operator and vLLM's exporters.

- Fleet: resources by kind and namespace, replicas desired and ready, services held by a bound, GPUs held per
  namespace (chargeback), replica start-up per phase (p50, p90), what is not well.
- Service (namespace, name): request rate, p50 and p99 against the target, queue and requests in the system,
  GPUs held and GPU-seconds per million tokens and inputs (the cost), arrivals against a replica's learned
  capacity, the autoscaler's decision beside the replicas, scale changes.
- Jobs (namespace): progress, rate and ETA per job, bytes against the storage budget, queued in Kueue.
- Operator: reconciles and their duration, writes, API requests by verb, queue depth, leader, first pass.

Metric and label names come from the modules that define them (pooling_operator.vllm.metrics for vLLM's,
status/series.py for the operator's per-resource series), never typed twice.

    python dashboards/generate.py          # write the files
    python dashboards/generate.py --check  # exit 1 when a committed file differs
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders.dashboard import Dashboard, DatasourceVariable, QueryVariable, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.table import Panel as Table
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from pooling_operator.vllm import metrics as V

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "charts" / "vllm-pooling-operator" / "files" / "dashboards"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
OBJ = "kind, namespace, name"


def one(selector: str) -> str:
    """A per-resource series, once per resource (every operator replica exports it)."""
    return f"max by ({OBJ}) ({selector})"


def target(expr: str, legend: str = "", instant: bool = False) -> Dataquery:
    q = Dataquery().expr(expr).legend_format(legend or "__auto").datasource(DS)
    return q.instant().format(PromQueryFormat.TABLE) if instant else q


def ts(title: str, unit: str, *targets: Dataquery, w: int = 12, desc: str = "") -> Timeseries:
    p = Timeseries().title(title).unit(unit).datasource(DS).span(w).height(8).description(desc)
    for i, t in enumerate(targets):
        p = p.with_target(t.ref_id(chr(ord("A") + i)))
    return p


def table(title: str, *targets: Dataquery, w: int = 12, desc: str = "") -> Table:
    p = Table().title(title).datasource(DS).span(w).height(8).description(desc)
    for i, t in enumerate(targets):
        p = p.with_target(t.ref_id(chr(ord("A") + i)))
    return p


def stat(title: str, unit: str, *targets: Dataquery, w: int = 6) -> Stat:
    p = Stat().title(title).unit(unit).datasource(DS).span(w).height(4)
    for i, t in enumerate(targets):
        p = p.with_target(t.ref_id(chr(ord("A") + i)))
    return p


def base(uid: str, title: str, description: str) -> Dashboard:
    ds = DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    return (Dashboard(title).uid(uid).tags(["vllm-pooling-operator"]).description(description).refresh("30s")
            .time("now-3h", "now").with_variable(ds))  # fmt: skip


def var(name: str, label: str, query: str) -> QueryVariable:
    return (QueryVariable(name).label(label).datasource(DS).query(query).refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(False))  # fmt: skip


# ---- the four dashboards -----------------------------------------------------------------------------------

C, R, L, S = "vllm_pooling_operator_condition", "vllm_pooling_operator_replicas", "vllm_pooling_operator_p99_latency_seconds", "vllm_pooling_operator_startup_seconds"  # fmt: skip
OBS, JS, JB = "vllm_pooling_operator_autoscaler_observed", "vllm_pooling_operator_job_samples", "vllm_pooling_operator_job_bytes"
SERVICES, JOBS = 'kind=~"PoolingService|ScoringService",namespace="$namespace",name="$name"', 'kind=~"HiddenStateJob|PoolingJob",namespace="$namespace"'


def of(family: str, label: str, value: str, scope: str = "", over: str = "") -> str:
    """One value of a per-resource family (`label` its own label), once per resource, in `scope`; with `over` (a
    range function: rate, changes) that function of each series over the rate interval, then once per resource."""
    selector = f'{family}{{{scope + "," if scope else ""}{label}=~"{value}"}}'
    return one(f"{over}({selector}[{RATE}])" if over else selector)


def p(q: float, histogram: str, by: str, scope: str = "") -> str:
    return f"histogram_quantile({q}, sum by (le{', ' + by if by else ''}) (rate({histogram}_bucket{{{scope}}}[{RATE}])))"


def fleet() -> Dashboard:
    start = "vllm_pooling_operator_replica_startup_seconds"
    return (base("vpo-fleet", "vLLM pooling: fleet", "Every PoolingService, ScoringService, HiddenStateJob, PoolingJob and ModelCache the operator watches.")
        .with_row(Row("Resources"))
        .with_panel(table("Resources by kind and namespace", target(f"count by (kind, namespace) ({of(C, 'type', 'SpecValid')})", instant=True), w=8))
        .with_panel(ts("Replicas of every service", "short",
                       target(f"sum by (namespace) ({of(R, 'state', 'desired')})", "desired {{namespace}}"),
                       target(f"sum by (namespace) ({of(R, 'state', 'ready')})", "ready {{namespace}}"), w=16))
        .with_row(Row("Capacity and cost"))
        .with_panel(ts("GPUs held per namespace (chargeback: whole and shared)", "short",
                       target(f"sum by (namespace) ({one('vllm_pooling_operator_gpus_held')})", "{{namespace}}"),
                       desc="What each service's pods hold: whole GPUs, or the fraction a share is."))
        .with_panel(table("Services held by a bound (ScalingLimited)", target(f"{of(C, 'type', 'ScalingLimited')} == 1", instant=True),
                          desc="maxReplicas, a policy's bound or a namespace GPU budget holds them; the condition's message names which."))
        .with_panel(ts("Replica start-up by phase (p50, p90)", "s", target(p(0.5, start, "phase"), "p50 {{phase}}"),
                       target(p(0.9, start, "phase"), "p90 {{phase}}"), w=24))
        .with_row(Row("Not well"))
        .with_panel(table("Autoscaling blind (MetricsAvailable=False)", target(f"{of(C, 'type', 'MetricsAvailable')} == 0", instant=True), w=8))
        .with_panel(table("Degraded", target(f"{of(C, 'type', 'Degraded')} == 1", instant=True), w=8))
        .with_panel(table("Not Ready", target(f"{of(C, 'type', 'Ready')} == 0", instant=True), w=8)))  # fmt: skip


def service() -> Dashboard:
    pods = f'{V.NAMESPACE_LABEL}="$namespace",{V.INSTANCE_LABEL}="$name"'
    return (base("vpo-service", "vLLM pooling: service", "One PoolingService or ScoringService: traffic, latency and the autoscaler's decisions.")
        .with_variable(var("namespace", "Namespace", f"label_values({R}, namespace)"))
        .with_variable(var("name", "Service", f'label_values({R}{{namespace="$namespace"}}, name)'))
        .with_row(Row("Traffic"))
        .with_panel(ts("Requests completed per second", "reqps", target(f"sum(rate({V.SUCCESS}{{{pods}}}[{RATE}]))", "completed"),
                       target(of(OBS, "what", "arrival_rate", SERVICES), "arrivals (autoscaler)")))
        .with_panel(ts("Latency against the target", "s", target(p(0.5, V.E2E_LATENCY, "", pods), "p50"),
                       target(p(0.99, V.E2E_LATENCY, "", pods), "p99"), target(of(L, "what", "target", SERVICES), "p99 target")))
        .with_panel(ts("Queue and requests in the system", "short", target(f"sum({V.WAITING}{{{pods}}})", "waiting"),
                       target(f"sum(rate({V.E2E_LATENCY}_sum{{{pods}}}[{RATE}]))", "in the system (Little's law)")))
        .with_panel(ts("Prompt tokens per second", "short", target(f"sum(rate({V.PROMPT_TOKENS}{{{pods}}}[{RATE}]))", "prompt tokens/s")))
        .with_row(Row("Cost"))
        .with_panel(ts("GPUs held", "short", target(f"sum({one(f'vllm_pooling_operator_gpus_held{{{SERVICES}}}')})", "GPUs held"),
                       desc="Its pods, loading or serving, times what one holds (a share counts its fraction)."))
        .with_panel(ts("GPU-seconds per million tokens and per million inputs", "short",
                       target(f"sum({one(f'vllm_pooling_operator_gpus_held{{{SERVICES}}}')}) / (sum(rate({V.PROMPT_TOKENS}{{{pods}}}[{RATE}])) / 1e6)",
                              "GPU-seconds per million tokens"),
                       target(f"sum({one(f'vllm_pooling_operator_gpus_held{{{SERVICES}}}')}) / (sum(rate({V.SUCCESS}{{{pods}}}[{RATE}])) / 1e6)",
                              "GPU-seconds per million inputs"),
                       desc="What status.cost reports per whole window, here at every moment: the GPUs held over the tokens "
                            "(inputs) served per second, in millions. With the policy's pricing.gpuHour, times the price / 3600 "
                            "is the price of a million tokens."))
        .with_row(Row("Autoscaling"))
        .with_panel(ts("Replicas: the autoscaler's decision and what is ready", "short",
                       *(target(of(R, "state", s, SERVICES), s) for s in ("desired", "ready", "min", "max")),
                       desc="desired is the autoscaler's last decision (spec.replicas for a fixed service)."))
        .with_panel(ts("Arrivals against a replica's learned capacity", "reqps", target(of(OBS, "what", "arrival_rate", SERVICES), "arrivals"),
                       target(of(OBS, "what", "capacity_per_replica", SERVICES), "one replica's capacity"),
                       target(f"{of(OBS, 'what', 'capacity_per_replica', SERVICES)} * {of(R, 'state', 'ready', SERVICES)}", "ready replicas' capacity")))
        .with_panel(ts("Scale changes", "short", target(of(R, "state", "desired", SERVICES, over="changes"), "decisions that changed the count")))
        .with_panel(ts("Start-up of its replicas", "s", target(of(S, "what", "last", SERVICES), "last"),
                       target(of(S, "what", "typical", SERVICES), "typical"))))  # fmt: skip


def jobs() -> Dashboard:
    done, total, rate = of(JS, "state", "done", JOBS), of(JS, "state", "total", JOBS), of(JS, "state", "done", JOBS, over="rate")
    return (base("vpo-jobs", "vLLM pooling: jobs", "HiddenStateJobs and PoolingJobs: progress, rate, ETA, storage and Kueue.")
        .with_variable(var("namespace", "Namespace", f"label_values({JS}, namespace)"))
        .with_row(Row("Progress"))
        .with_panel(ts("Inputs done", "short", target(done, "{{kind}} {{name}} done"), target(total, "{{kind}} {{name}} total")))
        .with_panel(ts("Inputs per second", "short", target(rate, "{{kind}} {{name}}")))
        .with_panel(ts("ETA", "s", target(f"({total} - {done}) / ({rate} > 0)", "{{kind}} {{name}}"),
                       desc="The inputs left at the rate of the last interval (PoolingJobs, whose shards count their dataset)."))
        .with_panel(ts("Failed inputs", "short", target(of(JS, "state", "failed", JOBS), "{{kind}} {{name}}")))
        .with_row(Row("Storage and queue"))
        .with_panel(ts("Output bytes against the storage budget", "bytes",
                       *(target(of(JB, "what", w, JOBS), "{{kind}} {{name}} " + w) for w in ("written", "estimated", "budget"))))
        .with_panel(table("Queued in Kueue (Queued=True)", target(f"{of(C, 'type', 'Queued', JOBS)} == 1", instant=True)))
        .with_panel(table("Succeeded and failed", target(f"{of(C, 'type', 'Succeeded|Failed', JOBS)} == 1", instant=True), w=24)))  # fmt: skip


def operator() -> Dashboard:
    dur = "vllm_pooling_operator_reconcile_duration_seconds"
    return (base("vpo-operator", "vLLM pooling: operator", "The operator itself: reconciles, writes, API requests, queue, leadership.")
        .with_row(Row("Leadership"))
        .with_panel(stat("Leader", "short", target("max(vllm_pooling_operator_leader)", "leading replicas")))
        .with_panel(stat("First full pass", "s", target("max(vllm_pooling_operator_first_pass_seconds)", "seconds after start")))
        .with_panel(stat("Queue depth", "short", target("max(vllm_pooling_operator_queue_depth)", "queued")))
        .with_panel(stat("Settled resources", "short", target("max(vllm_pooling_operator_settled_resources)", "settled")))
        .with_row(Row("Work"))
        .with_panel(ts("Reconciles per second", "ops", target(f"sum by (kind, result) (rate(vllm_pooling_operator_reconciles_total[{RATE}]))", "{{kind}} {{result}}")))
        .with_panel(ts("Reconcile duration (p50, p99)", "s", target(p(0.5, dur, "kind"), "p50 {{kind}}"), target(p(0.99, dur, "kind"), "p99 {{kind}}")))
        .with_panel(ts("Writes per second", "ops", target(f"sum by (kind, action) (rate(vllm_pooling_operator_writes_total[{RATE}]))", "{{action}} {{kind}}")))
        .with_panel(ts("API requests per second by verb", "reqps", target(f"sum by (verb) (rate(vllm_pooling_operator_api_requests_total[{RATE}]))", "{{verb}}")))
        .with_panel(ts("Queue depth", "short", target("vllm_pooling_operator_queue_depth", "{{instance}}")))
        .with_panel(ts("Events waiting to be posted, and dropped", "short",
                       target("vllm_pooling_operator_events_waiting", "waiting {{instance}}"),
                       target(f"sum(increase(vllm_pooling_operator_events_dropped_total[{RATE}]))", "dropped")))
        .with_panel(ts("Re-lists after a watch came back 410 Gone", "short", target(f"sum by (kind) (increase(vllm_pooling_operator_relist_sweeps_total[{RATE}]))", "{{kind}}"))))  # fmt: skip


DASHBOARDS: dict[str, Callable[[], Dashboard]] = {"fleet": fleet, "service": service, "jobs": jobs, "operator": operator}


def rendered() -> dict[str, str]:
    """{file name: JSON text} of every dashboard."""
    out = {}
    for name, make in DASHBOARDS.items():
        doc = json.loads(JSONEncoder(sort_keys=True, indent=1).encode(make().build()))
        out[f"{name}.json"] = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    return out


def queries(doc: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) of every target of a dashboard, rows' panels included."""
    for panel in doc.get("panels") or []:
        for inner in [panel, *(panel.get("panels") or [])]:
            for t in inner.get("targets") or []:
                yield str(inner.get("title")), str(t["expr"])


def main(argv: list[str]) -> int:
    files = rendered()
    if "--check" in argv:
        stale = [n for n, text in files.items() if not (OUT / n).is_file() or (OUT / n).read_text() != text]
        extra = sorted(p.name for p in OUT.glob("*.json") if p.name not in files)
        if stale or extra:
            print(f"dashboards out of date: {stale + extra}; run `make dashboards`", file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text)
    print(f"wrote {len(files)} dashboards into {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
