"""The operator at scale on the real control plane, beside the floor the API server sets on this machine.

For each N (default 100, 500, 1000) on a fresh local control plane (kwok GPU nodes enough for one GPU per
service, the API server writing an audit log of the operator's requests only):

1. the floor: the Deployments, Services and PodDisruptionBudgets `pooling-operator render` makes of the N
   services, created directly by a minimal client (httpx, HTTP/1.1 keep-alive, as many requests in flight as
   the operator has workers) -> `floor_s`; then deleted, and their namespace with them;
2. ours: the operator as a process (standalone: no Lease renewals; as deploy/rbac.yaml's ServiceAccount),
   the N services created by the same client -> `ours_s` until every Deployment exists (a watch sees each
   one: per-object create -> Deployment latency, p50 and p99), then until every service is Ready;
3. steady state: `--steady` seconds (5 minutes) with nothing changing: the operator's requests by verb and
   resource, from the audit log;
4. restart: the operator stopped and started again with N existing services: seconds until it reports its
   first full pass (`vllm_pooling_operator_first_pass_seconds`), and its requests meanwhile;
5. once the burst is absorbed: 50 more services created one every 200 ms -> create -> Deployment p50, p99
   (`p50_create_to_deployment_s`, `p99_create_to_deployment_s`; the burst's own are `burst_p50_...`).

The operator's peak RSS (VmHWM) and CPU seconds are read from /proc. Results go to
bench/results/reconcile.json as {"machine": ..., "runs": [...]}. Not part of `make test`.

    .venv/bin/python bench/reconcile/run.py                  # 100, 500, 1000; about 25 minutes
    .venv/bin/python bench/reconcile/run.py -n 100 --steady 60
    .venv/bin/python bench/reconcile/run.py --only restart   # 100, 500, 1000; three restarts each; ~10 minutes

`--only restart` skips the floor, the steady state and the paced creates: the N services are created with the
operator running and left to become Ready, then the operator is restarted `--restarts` times (default 3) and
each restart's first full pass, wall time, requests and peak RSS are recorded with their median
(`restart_runs`, `restart_median_s`); the creation's peak RSS is recorded too. `--profile DIR` writes a py-spy
flame graph of each restart (py-spy on PATH or in $PY_SPY; nothing is installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from e2e.harness.audit import OPERATOR_USER, split  # noqa: E402
from e2e.harness.config import GPU_PRODUCT, ClusterConfig  # noqa: E402
from e2e.harness.poll import wait_for  # noqa: E402
from e2e.kube.controlplane import ControlPlane  # noqa: E402
from e2e.kube.crds import install_crds  # noqa: E402
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig  # noqa: E402

API = "/apis/vllm-pooling.io/v1alpha1"
REVISION = "0" * 40  # a pinned revision (nothing is downloaded: kwok runs the pods)
CONCURRENCY = 16  # the operator's default VPO_WORKERS
PACED = 50  # services created one by one after the burst


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# What is created


def services(n: int, namespace: str) -> list[dict[str, Any]]:
    """Mixed kinds and tasks, one GPU each; every tenth autoscaled by the operator, every twentieth by KEDA."""
    gpu = {"gpu": {"count": 1, "product": GPU_PRODUCT}}
    out = []
    for i in range(n):
        name = f"svc-{i:04d}"
        if i % 4 == 3:
            spec: dict[str, Any] = {"model": {"name": "BAAI/bge-reranker-base", "revision": REVISION}, "mode": "crossEncoder", "resources": gpu}
            kind = "ScoringService"
        else:
            task = ("embed", "classify", "embed")[i % 4]
            model = "sentence-transformers/all-MiniLM-L6-v2" if task == "embed" else "cardiffnlp/twitter-roberta-base-sentiment"
            spec = {"model": {"name": model, "revision": REVISION}, "task": task, "resources": gpu}
            kind = "PoolingService"
        if i % 10 == 0:
            spec["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, "queueDepthPerReplica": 8}
        elif i % 20 == 5:
            spec["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, "backend": "keda", "queueDepthPerReplica": 8}
        out.append({"apiVersion": "vllm-pooling.io/v1alpha1", "kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    return out


def rendered_children(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The Deployments, Services and PDBs the operator would create, from `pooling-operator render`."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(yaml.safe_dump_all(objs))
    out = subprocess.run([sys.executable, "-m", "pooling_operator.cli", "render", f.name], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    kept = []
    for doc in yaml.safe_load_all(out):
        if doc and doc["kind"] in ("Deployment", "Service", "PodDisruptionBudget"):
            doc["metadata"].pop("ownerReferences", None)  # the floor has no owner to point at
            kept.append(doc)
    return kept


def url_for(obj: dict[str, Any]) -> str:
    kind, ns = obj["kind"], obj["metadata"]["namespace"]
    plural = {"Deployment": "/apis/apps/v1", "Service": "/api/v1", "PodDisruptionBudget": "/apis/policy/v1",
              "PoolingService": API, "ScoringService": API}[kind]
    return f"{plural}/namespaces/{ns}/{kind.lower()}s"


# ---------------------------------------------------------------------------------------------------------
# The minimal client


def client(cp: ControlPlane) -> httpx.AsyncClient:
    pki = cp.pki
    import ssl

    ctx = ssl.create_default_context(cafile=str(pki["ca.crt"]))
    ctx.load_cert_chain(str(pki["admin.crt"]), str(pki["admin.key"]))
    return httpx.AsyncClient(base_url=cp.server, verify=ctx, timeout=60,
                             limits=httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY))


async def create_all(cp: ControlPlane, objs: list[dict[str, Any]]) -> dict[str, float]:
    """POST every object, CONCURRENCY at a time; returns when each create was answered (monotonic), by kind/name."""
    done: dict[str, float] = {}
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for o in objs:
        queue.put_nowait(o)
    async with client(cp) as http:
        async def worker() -> None:
            while not queue.empty():
                o = queue.get_nowait()
                for attempt in range(5):
                    r = await http.post(url_for(o), json=o)
                    if r.status_code == 201:
                        break
                    if r.status_code in (429, 500, 503, 504):
                        await asyncio.sleep(0.2 * (attempt + 1))
                        continue
                    raise RuntimeError(f"create {o['kind']} {o['metadata']['name']}: {r.status_code} {r.text[:300]}")
                done[f"{o['kind']}/{o['metadata']['name']}"] = time.monotonic()

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done


def percentiles(watch: DeploymentWatch, answered: dict[str, float], objs: list[dict[str, Any]]) -> tuple[float, float]:
    latencies = sorted(watch.seen[o["metadata"]["name"]] - answered[f"{o['kind']}/{o['metadata']['name']}"] for o in objs)
    return round(statistics.median(latencies), 3), round(latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))], 3)


async def create_paced(cp: ControlPlane, objs: list[dict[str, Any]], gap: float) -> dict[str, float]:
    done: dict[str, float] = {}
    async with client(cp) as http:
        for o in objs:
            started = time.monotonic()
            r = await http.post(url_for(o), json=o)
            if r.status_code != 201:
                raise RuntimeError(f"create {o['metadata']['name']}: {r.status_code} {r.text[:300]}")
            done[f"{o['kind']}/{o['metadata']['name']}"] = time.monotonic()
            await asyncio.sleep(max(0.0, gap - (time.monotonic() - started)))
    return done


class DeploymentWatch:
    """When each Deployment of a namespace was first seen, by a watch (local monotonic clock)."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.cp, self.namespace = cp, namespace
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self._ready.wait(60):
            raise RuntimeError("the Deployment watch did not start")

    def _run(self) -> None:
        from kubernetes import watch

        api = self.cp.api_client()
        from kubernetes.client import AppsV1Api

        apps = AppsV1Api(api)
        listed = apps.list_namespaced_deployment(self.namespace)
        rv = listed.metadata.resource_version
        for d in listed.items:
            self.seen.setdefault(d.metadata.name, time.monotonic())
        self._ready.set()
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(apps.list_namespaced_deployment, self.namespace, resource_version=rv,
                                                  timeout_seconds=30, allow_watch_bookmarks=False):
                    obj = event["object"]
                    rv = obj.metadata.resource_version
                    self.seen.setdefault(obj.metadata.name, time.monotonic())
                    if self._stop.is_set():
                        return
            except Exception as exc:  # a 410 or a dropped stream: list again
                if self._stop.is_set():
                    return
                say(f"deployment watch restarted: {type(exc).__name__}")
                rv = apps.list_namespaced_deployment(self.namespace).metadata.resource_version
                for d in apps.list_namespaced_deployment(self.namespace).items:
                    self.seen.setdefault(d.metadata.name, time.monotonic())

    def stop(self) -> None:
        self._stop.set()


# ---------------------------------------------------------------------------------------------------------
# The audit log


# ---------------------------------------------------------------------------------------------------------
# One run


def proc_figures(pid: int) -> tuple[float, float]:
    """(peak RSS MiB, CPU seconds) of a live process."""
    hwm = next(int(line.split()[1]) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("VmHWM:"))
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return hwm / 1024, cpu


def metric(op: OperatorProcess, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", op.metrics(), re.M)
    return float(m.group(1)) if m else 0.0


def ready_count(cp: ControlPlane, namespace: str) -> int:
    n = 0
    for plural in ("poolingservices", "scoringservices"):
        for o in cp.api.get(f"{API}/namespaces/{namespace}/{plural}")["items"]:  # type: ignore[union-attr]
            conds = {c["type"]: c["status"] for c in (o.get("status") or {}).get("conditions") or []}
            n += conds.get("Ready") == "True"
    return n


def count(cp: ControlPlane, path: str) -> int:
    return len(cp.api.get(path, timeout=60)["items"])  # type: ignore[union-attr]


def bench_cluster(n: int, run_dir: Path, keep: bool) -> ControlPlane:
    """A fresh control plane for N services: GPU nodes for one GPU each, controllers at 300 qps, the operator audited."""
    qps = ["--kube-api-qps=300", "--kube-api-burst=600"]
    config = ClusterConfig(
        gpu_nodes=math.ceil(n / 8) + 2, gpus_per_node=8, cpu_nodes=1, start_timeout=300, audit_users=(OPERATOR_USER,),
        extra_args={
            "kube-controller-manager": [*qps, "--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20"],
            "kube-scheduler": qps,
        },
    )
    say(f"N={n}: starting a control plane with {config.gpu_nodes} GPU nodes in {run_dir}")
    return ControlPlane(config, run_dir=run_dir, keep_run_dir=keep).start()


def run_one(n: int, steady: float, keep: bool) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"vpo-bench-{n}-"))
    cp = bench_cluster(n, run_dir, keep)
    row: dict[str, Any] = {"n": n}
    audit = cp.audit
    ops: list[OperatorProcess] = []  # stopped whatever happens: an operator outliving its control plane spins
    try:
        install_crds(cp)
        kubeconfig = least_privilege_kubeconfig(cp)
        objs_floor = rendered_children(services(n, "floor"))
        cp.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "floor"}})  # type: ignore[union-attr]

        # 1. the floor
        deployments = [o for o in objs_floor if o["kind"] == "Deployment"]
        started = time.monotonic()
        asyncio.run(create_all(cp, objs_floor))
        row["floor_s"] = round(time.monotonic() - started, 2)
        row["floor_objects"] = len(objs_floor)
        assert count(cp, "/apis/apps/v1/namespaces/floor/deployments") == len(deployments)
        say(f"N={n}: floor: {len(objs_floor)} objects ({len(deployments)} Deployments) in {row['floor_s']}s")
        cp.api.request("DELETE", "/api/v1/namespaces/floor")  # type: ignore[union-attr]
        wait_for(lambda: cp.api.request("GET", "/api/v1/namespaces/floor")[0] == 404, timeout=600, what="floor namespace gone")  # type: ignore[union-attr]
        wait_for(lambda: count(cp, "/api/v1/pods") == 0, timeout=600, what="floor pods gone")

        # 2. ours
        cp.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})  # type: ignore[union-attr]
        wait_for(lambda: cp.api.request("GET", "/api/v1/namespaces/bench/serviceaccounts/default")[0] == 200, timeout=60, what="bench SA")  # type: ignore[union-attr]
        op = OperatorProcess(cp, "operator", resync_seconds=30, standalone=True, kubeconfig=kubeconfig)
        ops.append(op)
        op.start(timeout=120)
        watch = DeploymentWatch(cp, "bench")
        objs = services(n, "bench")
        create_mark = audit.mark()
        started = time.monotonic()
        answered = asyncio.run(create_all(cp, objs))
        wait_for(lambda: len(watch.seen) >= n, timeout=1800, interval=0.2, what=f"{n} Deployments")
        row["ours_s"] = round(max(watch.seen.values()) - started, 2)
        p50, p99 = percentiles(watch, answered, objs)
        row["burst_p50_create_to_deployment_s"], row["burst_p99_create_to_deployment_s"] = p50, p99
        row["ratio_to_floor"] = round(row["ours_s"] / row["floor_s"], 2)
        say(f"N={n}: ours: {n} Deployments in {row['ours_s']}s ({row['ratio_to_floor']}x the floor); "
            f"create->Deployment during the burst: p50 {p50}s p99 {p99}s")
        wait_for(lambda: ready_count(cp, "bench") >= n, timeout=1800, interval=2, what=f"{n} services Ready")
        row["all_ready_s"] = round(time.monotonic() - started, 2)
        # the burst absorbed: the last 10 % of creates, paced, give the latency once the queue is empty
        reads, writes, by = split(audit.since(create_mark))
        row["create_reads"], row["create_writes"], row["create_requests"] = reads, writes, by
        say(f"N={n}: all Ready at {row['all_ready_s']}s; operator requests during creation: {reads} reads, {writes} writes")
        settle = time.monotonic() + 20  # let the last status writes and events land before the window opens
        wait_for(lambda: time.monotonic() >= settle, timeout=60, what="settling")

        # 3. steady state
        mark = audit.mark()
        steady_started = time.monotonic()
        wait_for(lambda: time.monotonic() - steady_started >= steady, timeout=steady + 60, interval=5, what="the steady-state window")
        reads, writes, by = split(audit.since(mark))
        minutes = steady / 60
        row["steady_state_seconds"] = steady
        row["steady_state_writes"] = writes
        row["steady_state_reads_per_min"] = round(reads / minutes, 2)
        row["steady_state_requests"] = by
        rss, cpu = proc_figures(op.proc.pid)  # type: ignore[union-attr]
        row["operator_peak_rss_mb"] = round(rss, 1)
        row["operator_cpu_s"] = round(cpu, 1)
        say(f"N={n}: steady state {steady:.0f}s: {writes} writes, {row['steady_state_reads_per_min']} reads/min; "
            f"operator peak RSS {rss:.0f} MiB, CPU {cpu:.1f}s")

        # 4. restart with N existing services
        op.stop()
        mark = audit.mark()
        restarted = time.monotonic()
        op2 = OperatorProcess(cp, "operator-restarted", resync_seconds=30, standalone=True, kubeconfig=kubeconfig)
        ops.append(op2)
        op2.start(timeout=120)
        wait_for(lambda: metric(op2, "vllm_pooling_operator_first_pass_seconds") > 0, timeout=600, interval=0.5, what="the first full pass")
        row["restart_resync_s"] = round(metric(op2, "vllm_pooling_operator_first_pass_seconds"), 2)
        row["restart_wall_s"] = round(time.monotonic() - restarted, 2)
        reads, writes, by = split(audit.since(mark))
        row["restart_writes"], row["restart_reads"], row["restart_requests"] = writes, reads, by
        rss2, cpu2 = proc_figures(op2.proc.pid)  # type: ignore[union-attr]
        row["restart_peak_rss_mb"], row["restart_cpu_s"] = round(rss2, 1), round(cpu2, 1)
        say(f"N={n}: restart: first full pass {row['restart_resync_s']}s after start ({row['restart_wall_s']}s wall), "
            f"{writes} writes, {reads} reads")

        # 5. once the burst is absorbed: PACED more services, one every 200 ms, while the N exist
        extra = [dict(o, metadata={"name": f"paced-{i:03d}", "namespace": "bench"}) for i, o in enumerate(services(PACED, "bench"))]
        answered = asyncio.run(create_paced(cp, extra, 0.2))
        wait_for(lambda: all(o["metadata"]["name"] in watch.seen for o in extra), timeout=600, what="paced Deployments")
        p50, p99 = percentiles(watch, answered, extra)
        row["p50_create_to_deployment_s"], row["p99_create_to_deployment_s"] = p50, p99
        say(f"N={n}: {PACED} more services, one every 200 ms: create->Deployment p50 {p50}s p99 {p99}s")
        watch.stop()
        op2.stop()
    finally:
        for o in ops:
            o.stop()
        cp.stop()
    return row


def restart_once(cp: ControlPlane, kubeconfig: Path, label: str, profile: Path | None) -> dict[str, Any]:
    """Start an operator over what exists; until its first full pass: seconds, wall, requests, peak RSS."""
    audit = cp.audit
    mark = audit.mark()
    started = time.monotonic()
    op = OperatorProcess(cp, label, resync_seconds=30, standalone=True, kubeconfig=kubeconfig)
    spy: subprocess.Popen[bytes] | None = None
    try:
        op.start(timeout=120)
        if profile is not None:
            profile.mkdir(parents=True, exist_ok=True)
            exe = os.environ.get("PY_SPY", "py-spy")
            spy = subprocess.Popen([exe, "record", "--pid", str(op.proc.pid), "--rate", "50", "--nonblocking",  # type: ignore[union-attr]
                                    "--format", "speedscope", "-o", str(profile / f"{label}.json")],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
        wait_for(lambda: metric(op, "vllm_pooling_operator_first_pass_seconds") > 0, timeout=900, interval=0.5, what="the first full pass")
        row: dict[str, Any] = {"first_pass_s": round(metric(op, "vllm_pooling_operator_first_pass_seconds"), 2),
                               "wall_s": round(time.monotonic() - started, 2)}  # fmt: skip
        reads, writes, by = split(audit.since(mark))
        rss, cpu = proc_figures(op.proc.pid)  # type: ignore[union-attr]
        row.update(reads=reads, writes=writes, requests=by, peak_rss_mb=round(rss, 1), cpu_s=round(cpu, 1))
        return row
    finally:
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(timeout=60)
        op.stop()


def run_restarts(n: int, restarts: int, keep: bool, profile: Path | None) -> dict[str, Any]:
    """--only restart: N services made Ready by one operator, then `restarts` restarts over them."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"vpo-bench-restart-{n}-"))
    cp = bench_cluster(n, run_dir, keep)
    row: dict[str, Any] = {"n": n, "only": "restart"}
    try:
        install_crds(cp)
        kubeconfig = least_privilege_kubeconfig(cp)
        cp.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "bench"}})  # type: ignore[union-attr]
        wait_for(lambda: cp.api.request("GET", "/api/v1/namespaces/bench/serviceaccounts/default")[0] == 200, timeout=60, what="bench SA")  # type: ignore[union-attr]
        op = OperatorProcess(cp, "operator", resync_seconds=30, standalone=True, kubeconfig=kubeconfig)
        try:
            op.start(timeout=120)
            started = time.monotonic()
            asyncio.run(create_all(cp, services(n, "bench")))
            wait_for(lambda: ready_count(cp, "bench") >= n, timeout=1800, interval=2, what=f"{n} services Ready")
            row["all_ready_s"] = round(time.monotonic() - started, 2)
            rss, cpu = proc_figures(op.proc.pid)  # type: ignore[union-attr]
            row["operator_peak_rss_mb"], row["operator_cpu_s"] = round(rss, 1), round(cpu, 1)
            say(f"N={n}: {n} services Ready in {row['all_ready_s']}s; operator peak RSS {rss:.0f} MiB, CPU {cpu:.1f}s")
        finally:
            op.stop()
        runs = []
        for i in range(restarts):
            r = restart_once(cp, kubeconfig, f"operator-restart-{i + 1}", profile / f"n{n}" if profile else None)
            runs.append(r)
            say(f"N={n}: restart {i + 1}: first full pass {r['first_pass_s']}s ({r['wall_s']}s wall), {r['writes']} writes, "
                f"{r['reads']} reads, peak RSS {r['peak_rss_mb']:.0f} MiB, CPU {r['cpu_s']}s")
        row["restart_runs"] = runs
        row["restart_median_s"] = statistics.median(r["first_pass_s"] for r in runs)
        row["restart_peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
        say(f"N={n}: restart median {row['restart_median_s']}s, peak RSS {row['restart_peak_rss_mb']:.0f} MiB")
    finally:
        cp.stop()
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, action="append", help="services (repeatable); default 100, 500, 1000")
    p.add_argument("--steady", type=float, default=300, help="steady-state window in seconds (default 300)")
    p.add_argument("--keep", action="store_true", help="keep each run's folder (logs, audit log)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reconcile.json")
    p.add_argument("--only", choices=["restart"], help="restart: only the restart phase, --restarts times (see above)")
    p.add_argument("--restarts", type=int, default=3, help="restarts per N with --only restart (default 3)")
    p.add_argument("--label", default="", help="with --only restart: a name for this set of rows (before, after)")
    p.add_argument("--profile", type=Path, help="with --only restart: py-spy speedscope profiles of each restart here")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the operator and the control plane
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
               "date": time.strftime("%Y-%m-%d"), "operator_workers": CONCURRENCY}
    runs = []
    for n in args.n or [100, 500, 1000]:
        if args.only == "restart":
            runs.append(run_restarts(n, args.restarts, args.keep, args.profile))
        else:
            runs.append(run_one(n, args.steady, args.keep))
        if args.only is None:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps({"machine": machine, "runs": runs}, indent=2) + "\n")
    if args.only == "restart":  # the full runs stay; restart rows are added under "restart"
        recorded = json.loads(args.out.read_text()) if args.out.exists() else {"machine": machine, "runs": []}
        recorded.setdefault("restart", []).append({"machine": machine, "label": args.label, "runs": runs})
        args.out.write_text(json.dumps(recorded, indent=2) + "\n")
        print(f"N / first full pass (median of {args.restarts}) / peak RSS: " + "; ".join(
            f"{r['n']}: {r['restart_median_s']}s / {r['restart_peak_rss_mb']:.0f} MiB" for r in runs))
    print(json.dumps(runs, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
