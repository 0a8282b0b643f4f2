"""Pictures of the chart's Grafana dashboards, drawn from a Prometheus with matplotlib (what `simulate --plot`
uses): every time-series panel of a dashboard (dashboards/generate.py), its queries evaluated over a range with
the dashboard's variables set, one PNG per dashboard (docs/img/dashboard-<name>.png, shown in docs/dashboards.md).

    python bench/dashboards/draw.py --demo [--out docs/img]
        a real run on this machine: a local control plane, the operator, a real Prometheus and the vLLM stand-in
        exporters (e2e/standin) serving an autoscaled PoolingService through a load step (40 -> 400 -> 40 req/s),
        a PoolingJob whose shards report progress, a ModelCache; then the pictures (about 6 minutes)
    python bench/dashboards/draw.py --prometheus URL --namespace NS --name NAME [--minutes 30] [--out DIR]
        the same pictures from any Prometheus that scrapes the operator and the service's pods

Loopback only: the harness's processes listen on 127.0.0.1. Every loop is bounded in count and time. Not part of
`make test` (tests/test_dashboards.py and the operator tier check the queries themselves).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from dashboards import generate  # noqa: E402

DRAWN = ("fleet", "service", "jobs", "operator")


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The dashboard's time-series panels, rows' panels included, in order."""
    out = []
    for p in doc.get("panels") or []:
        for inner in [p, *(p.get("panels") or [])]:
            if inner.get("type") == "timeseries" and inner.get("targets"):
                out.append(inner)
    return out


def query_range(url: str, expr: str, start: float, end: float, step: float) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
    r = httpx.get(f"{url}/api/v1/query_range", params={"query": expr, "start": start, "end": end, "step": step}, timeout=30)
    r.raise_for_status()
    body = r.json()
    if body.get("status") != "success":
        raise RuntimeError(f"{expr}: {body}")
    return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]]) for s in body["data"]["result"]]


def legend(fmt: str, labels: dict[str, str]) -> str:
    if fmt in ("", "__auto"):
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__") or "value"
    for k, v in labels.items():
        fmt = fmt.replace("{{" + k + "}}", v)
    return fmt


def draw(name: str, doc: dict[str, Any], url: str, variables: dict[str, str], minutes: float, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = panels(doc)
    end = time.time()
    start, step = end - minutes * 60, max(2.0, minutes * 60 / 300)
    cols = 2
    rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 3.1 * rows), squeeze=False)
    for ax, panel in zip(axes.flat, shown, strict=False):
        for t in panel["targets"]:
            expr = t["expr"].replace("$__rate_interval", "1m")
            for var, value in variables.items():
                expr = expr.replace(f"${var}", value)
            for labels, values in query_range(url, expr, start, end, step):
                xs = [(t0 - start) / 60 for t0, v in values if not math.isnan(v)]
                ys = [v for _, v in values if not math.isnan(v)]
                if xs:
                    ax.plot(xs, ys, label=legend(t.get("legendFormat", ""), labels)[:48], linewidth=1.4)
        ax.set_title(panel["title"], fontsize=10)
        ax.set_xlabel("minutes", fontsize=8)
        unit = ((panel.get("fieldConfig") or {}).get("defaults") or {}).get("unit", "")
        ax.set_ylabel(unit, fontsize=8)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    fig.suptitle(f"{doc['title']} ({', '.join(f'{k}={v}' for k, v in variables.items()) or 'all'})", fontsize=12)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"dashboard-{name}.png"
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path


def draw_all(url: str, namespace: str, name: str, minutes: float, out: Path) -> list[Path]:
    docs = {n: json.loads(text) for n, text in generate.rendered().items()}
    variables = {"fleet": {}, "service": {"namespace": namespace, "name": name}, "jobs": {"namespace": namespace}, "operator": {}}
    return [draw(n, docs[f"{n}.json"], url, variables[n], minutes, out) for n in DRAWN]


def demo(out: Path) -> list[Path]:
    """A real run on this machine, then the pictures. ~6 minutes: a load step and back, a job progressing."""
    import yaml

    from e2e.harness.config import GPU_PRODUCT, ClusterConfig
    from e2e.kube.controlplane import ControlPlane
    from e2e.kube.crds import install_crds
    from e2e.kube.prometheus import PrometheusServer
    from e2e.operator_process import OperatorProcess
    from e2e.standin.exporters import READY_AFTER_ANNOTATION, ExporterFleet, write_load
    from e2e.tests.operator.test_hidden_states import claims
    from tests.factories import model_cache, pooling, pooling_job

    run_dir = Path(tempfile.mkdtemp(prefix="vpo-dashboards-"))
    say = lambda m: print(f"[dashboards {time.strftime('%H:%M:%S')}] {m}", flush=True)  # noqa: E731
    cp = ControlPlane(ClusterConfig(gpu_nodes=2, gpus_per_node=8, cpu_nodes=1), run_dir=run_dir / "cluster").start()
    op = prom = fleet = None
    try:
        install_crds(cp)
        prom = PrometheusServer(run_dir / "prometheus", scrape_interval="2s").start()
        op = OperatorProcess(cp, "operator", standalone=True)
        op.env["VPO_AUTOSCALE_SECONDS"] = "5"
        op.start()
        prom.write_targets(prom.targets_path("operator"), [{"targets": [f"127.0.0.1:{op.metrics_port}"]}])
        ns = "search"
        cp.kubectl("create", "namespace", ns)
        apply = lambda o: cp.kubectl("apply", "--server-side", "-f", "-", input=yaml.safe_dump(o))  # noqa: E731
        apply({"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "AutoscalingPolicy", "metadata": {"name": "demo"},
               "spec": {"prometheus": {"url": prom.url, "timeout": "2s"}}})  # fmt: skip
        gpu = {"gpu": {"count": 1, "product": GPU_PRODUCT}}
        apply(pooling({"resources": gpu, "autoscaling": {"minReplicas": 1, "maxReplicas": 6, "window": "20s", "p99Latency": "250ms",
                       "scaleDown": {"stabilizationSeconds": 30}, "policyRef": {"name": "demo"}},
                       "template": {"annotations": {READY_AFTER_ANNOTATION: "20s"}}}, name="minilm", namespace=ns))  # fmt: skip
        apply(model_cache({"storage": {"size": "2Gi"}}, namespace=ns))
        claims(cp, ns)  # two bound claims, "datasets" and "hidden-states"
        apply(pooling_job({"resources": gpu, "dataset": {"volume": {"claimName": "datasets", "path": "/corpus.jsonl"}},
                           "output": {"volume": {"claimName": "hidden-states", "path": "/runs/v1"}, "storageBudget": "4Mi"}},
                          name="corpus", namespace=ns))  # fmt: skip
        load = run_dir / "load.json"
        write_load(load, requests_per_second=40)
        fleet = ExporterFleet(cp, ns, "minilm", "pooling-service", "minilm", prom, load).start()
        began = time.monotonic()
        phases = [(60, 40.0), (150, 400.0), (150, 40.0)]  # (seconds, requests per second)
        for seconds, rps in phases:
            write_load(load, requests_per_second=rps)
            say(f"load {rps:g} req/s for {seconds} s")
            until = time.monotonic() + seconds
            while time.monotonic() < until:  # the job's shards report every 15 s (bounded by the phase's end)
                done = int((time.monotonic() - began) * 2)
                report = {f"shard-{i}": json.dumps({"state": "running", "done": done, "failed": 0, "bytes": done * 1536,
                                                    "total": 1200, "lines": 2400, "hiddenSize": 384, "valueBytes": 4})
                          for i in range(2)}  # fmt: skip
                cp.kubectl("patch", "configmap/corpus-progress", "-n", ns, "--type=merge", "-p", json.dumps({"data": report}), check=False)
                time.sleep(max(0.0, min(15.0, until - time.monotonic())))  # pacing the load profile, not synchronising
        minutes = (time.monotonic() - began) / 60 + 0.5
        say(f"drawing the last {minutes:.1f} minutes")
        return draw_all(prom.url, ns, "minilm", minutes, out)
    finally:
        for part in (fleet, op, prom):
            if part is not None:
                (part.close if part is fleet else part.stop)()
        cp.stop()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--demo", action="store_true", help="a real local run, then the pictures")
    ap.add_argument("--prometheus", help="a Prometheus that scrapes the operator and the service's pods")
    ap.add_argument("--namespace", default="default")
    ap.add_argument("--name", default="")
    ap.add_argument("--minutes", type=float, default=30)
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args(argv)
    if args.demo:
        paths = demo(args.out)
    elif args.prometheus:
        paths = draw_all(args.prometheus.rstrip("/"), args.namespace, args.name, args.minutes, args.out)
    else:
        ap.error("--demo or --prometheus URL")
    for p in paths:
        print(f"wrote {p.relative_to(ROOT) if p.is_relative_to(ROOT) else p} ({p.stat().st_size // 1024} KiB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
