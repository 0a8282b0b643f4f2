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
flame graph of each restart, in either mode, and of each shard from its start until nothing is left to do after
the burst (py-spy on PATH or in $PY_SPY; nothing is installed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from observe import (  # noqa: E402  (this folder: run as a script)
    API,
    CONCURRENCY,
    DeploymentWatch,
    count,
    create_all,
    create_paced,
    decided_count,
    labelled,
    metric,
    percentiles,
    proc_figures,
    ready_count,
    resident_mb,
    say,
)

from e2e.harness.audit import OPERATOR_USER, split  # noqa: E402
from e2e.harness.config import GPU_PRODUCT, ClusterConfig  # noqa: E402
from e2e.harness.poll import wait_for  # noqa: E402
from e2e.kube.controlplane import ControlPlane  # noqa: E402
from e2e.kube.crds import install_crds  # noqa: E402
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig  # noqa: E402

REVISION = "0" * 40  # a pinned revision (nothing is downloaded: kwok runs the pods)
PACED = 50  # services created one by one after the burst


# ---------------------------------------------------------------------------------------------------------
# What is created

NAMESPACES = 1  # --namespaces: services spread round-robin over this many namespaces (a shard owns whole namespaces)
SHARDS = 1  # --shards: operator processes, each `--shard i/SHARDS`
FLOOR = True  # --no-floor: skip the floor (a run that checks the rest; no ratio)
POLICY = False  # --policy: a default AutoscalingPolicy that the autoscaled services follow (its count moves as they come)


def creation_timeout(n: int) -> float:
    """How long to wait for n services' objects to be created, Ready or deleted: 30 minutes, or 0.4 s a service
    (10,000 services once took 31 minutes to 9,123 Deployments here, in a restart-only run)."""
    return max(1800.0, 0.4 * n)


def bench_namespaces(base: str = "bench") -> list[str]:
    return [base] if NAMESPACES == 1 else [f"{base}-{j:02d}" for j in range(NAMESPACES)]


def services(n: int, namespace: str, spread: bool = False) -> list[dict[str, Any]]:
    """Mixed kinds and tasks, one GPU each; every tenth autoscaled by the operator, every twentieth by KEDA. With
    `spread`, service i goes to namespace i mod NAMESPACES (bench_namespaces)."""
    gpu = {"gpu": {"count": 1, "product": GPU_PRODUCT}}
    homes = bench_namespaces(namespace) if spread else [namespace]
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
        meta = {"name": name, "namespace": homes[i % len(homes)]}
        out.append({"apiVersion": "vllm-pooling.io/v1alpha1", "kind": kind, "metadata": meta, "spec": spec})
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


GPUS_PER_NODE = 8


def bench_cluster(n: int, run_dir: Path, keep: bool) -> ControlPlane:
    """A fresh control plane for N services: GPU nodes for one GPU each, controllers at 300 qps, the operator audited.
    Nodes hold GPUS_PER_NODE GPUs (--gpus-per-node): the operator never reads nodes, but every kwok node renews a
    Lease, and 1,252 nodes of 8 at 10,000 services would put that load on the same two cores."""
    qps = ["--kube-api-qps=300", "--kube-api-burst=600"]
    config = ClusterConfig(
        gpu_nodes=math.ceil(n / GPUS_PER_NODE) + 2, gpus_per_node=GPUS_PER_NODE, cpu_nodes=1, start_timeout=300, audit_users=(OPERATOR_USER,),
        extra_args={
            "kube-controller-manager": [*qps, "--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20"],
            "kube-scheduler": qps,
        },
    )
    say(f"N={n}: starting a control plane with {config.gpu_nodes} GPU nodes in {run_dir}")
    return ControlPlane(config, run_dir=run_dir, keep_run_dir=keep).start()


def floor(cp: ControlPlane, n: int, row: dict[str, Any]) -> None:
    """1. the floor: a direct client writes the same children (--no-floor skips it: a run that checks the rest)."""
    objs_floor = rendered_children(services(n, "floor"))
    cp.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": "floor"}})  # type: ignore[union-attr]
    deployments = [o for o in objs_floor if o["kind"] == "Deployment"]
    started = time.monotonic()
    asyncio.run(create_all(cp, objs_floor))
    row["floor_s"] = round(time.monotonic() - started, 2)
    row["floor_objects"] = len(objs_floor)
    assert count(cp, "/apis/apps/v1/namespaces/floor/deployments") == len(deployments)
    say(f"N={n}: floor: {len(objs_floor)} objects ({len(deployments)} Deployments) in {row['floor_s']}s")
    cp.api.request("DELETE", "/api/v1/namespaces/floor")  # type: ignore[union-attr]
    # (at 10,000 the namespace controller's first pass timed out once and backed off: give it time)
    wait_for(lambda: cp.api.request("GET", "/api/v1/namespaces/floor")[0] == 404, timeout=creation_timeout(n), interval=5, what="floor namespace gone")  # type: ignore[union-attr]
    wait_for(lambda: count(cp, "/api/v1/pods") == 0, timeout=creation_timeout(n), interval=5, what="floor pods gone")


def run_one(n: int, steady: float, keep: bool, profile: Path | None = None) -> dict[str, Any]:
    run_dir = Path(tempfile.mkdtemp(prefix=f"vpo-bench-{n}-"))
    cp = bench_cluster(n, run_dir, keep)
    row: dict[str, Any] = {"n": n}
    audit = cp.audit
    ops: list[OperatorProcess] = []  # stopped whatever happens: an operator outliving its control plane spins
    try:
        install_crds(cp)
        if POLICY:
            cp.api.request("POST", f"{API}/autoscalingpolicies", {  # type: ignore[union-attr]
                "apiVersion": "vllm-pooling.io/v1alpha1", "kind": "AutoscalingPolicy", "metadata": {"name": "platform"},
                "spec": {"default": True, "limits": {"maxReplicas": 4}}})
            row["policy"] = True
        kubeconfig = least_privilege_kubeconfig(cp)
        if FLOOR:
            floor(cp, n, row)

        # 2. ours
        homes = bench_namespaces()
        for ns in homes:
            cp.api.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})  # type: ignore[union-attr]
            wait_for(lambda ns=ns: cp.api.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200,  # type: ignore[union-attr]
                     timeout=60, what=f"{ns} SA")  # fmt: skip
        shards = operators(cp, kubeconfig, "operator")
        ops.extend(shards)
        creating = spy_on(shards, profile / f"n{n}" if profile else None, "operator-creating")
        watch = DeploymentWatch(cp, homes)
        objs = services(n, "bench", spread=True)
        create_mark = audit.mark()
        started = time.monotonic()
        answered = asyncio.run(create_all(cp, objs))
        wait_for(lambda: len(watch.seen) >= n, timeout=creation_timeout(n), interval=0.2, what=f"{n} Deployments")
        row["ours_s"] = round(max(watch.seen.values()) - started, 2)
        p50, p99 = percentiles(watch, answered, objs)
        row["burst_p50_create_to_deployment_s"], row["burst_p99_create_to_deployment_s"] = p50, p99
        if FLOOR:
            row["ratio_to_floor"] = round(row["ours_s"] / row["floor_s"], 2)
        say(f"N={n}: ours: {n} Deployments in {row['ours_s']}s ({row.get('ratio_to_floor', 'no floor run: ?')}x the floor); "
            f"create->Deployment during the burst: p50 {p50}s p99 {p99}s")
        wait_for(lambda: ready_count(cp, homes) >= n, timeout=creation_timeout(n), interval=2, what=f"{n} services Ready")
        row["all_ready_s"] = round(time.monotonic() - started, 2)
        # the burst absorbed: the last 10 % of creates, paced, give the latency once the queue is empty
        reads, writes, by = split(audit.since(create_mark))
        row["create_reads"], row["create_writes"], row["create_requests"] = reads, writes, by
        say(f"N={n}: all Ready at {row['all_ready_s']}s; operator requests during creation: {reads} reads, {writes} writes")
        # the window opens once nothing is left to do: the autoscaler has made its first decision on each service it
        # scales (its status and event come up to a loop period after Ready), and no shard has a resource waiting
        # for a reconcile or an event waiting to be posted (a burst's events trail its writes: at 10,000 they
        # used to post into the window)
        autoscaled = sum(1 for o in objs if (o["spec"].get("autoscaling") or {"backend": "keda"}).get("backend") != "keda")
        wait_for(lambda: decided_count(cp, homes) >= autoscaled, timeout=creation_timeout(n), interval=2, what="the autoscaler's first decisions")
        wait_for(lambda: all(metric(o, "vllm_pooling_operator_events_waiting") == 0
                             and metric(o, "vllm_pooling_operator_queue_depth") == 0 for o in shards),
                 timeout=creation_timeout(n), interval=0.5, what="no reconcile or event waiting")  # fmt: skip
        row["settled_after_ready_s"] = round(time.monotonic() - started - row["all_ready_s"], 2)
        row["events_dropped"] = sum(metric(o, "vllm_pooling_operator_events_dropped_total") for o in shards)
        say(f"N={n}: nothing left to do {row['settled_after_ready_s']}s after all Ready; {row['events_dropped']:.0f} events dropped")
        stop_spies(creating)

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
        passes = [labelled(o, "vllm_pooling_operator_resync_passes_total") for o in shards]
        row["full_passes"] = {why: sum(p.get(why, 0) for p in passes) for why in sorted({w for p in passes for w in p})}
        figures = [proc_figures(o.proc.pid) for o in shards]  # type: ignore[union-attr]
        rss, cpu = max(f[0] for f in figures), sum(f[1] for f in figures)
        row["operator_peak_rss_mb"] = round(rss, 1)  # the largest shard's
        row["operator_rss_after_steady_mb"] = round(max(resident_mb(o.proc.pid) for o in shards), 1)  # type: ignore[union-attr]
        row["operator_cpu_s"] = round(cpu, 1)  # every shard's
        if SHARDS > 1:
            row["shard_peak_rss_mb"] = [round(f[0], 1) for f in figures]
            row["shard_cpu_s"] = [round(f[1], 1) for f in figures]
        say(f"N={n}: steady state {steady:.0f}s: {writes} writes, {row['steady_state_reads_per_min']} reads/min; "
            f"operator peak RSS {rss:.0f} MiB, CPU {cpu:.1f}s")

        # 4. restart with N existing services
        for o in shards:
            o.stop()
        mark = audit.mark()
        restarted = time.monotonic()
        again = operators(cp, kubeconfig, "operator-restarted")
        ops.extend(again)
        spies = spy_on(again, profile / f"n{n}" if profile else None, "operator-restarted")
        wait_for(lambda: all(metric(o, "vllm_pooling_operator_first_pass_seconds") > 0 for o in again), timeout=600, interval=0.5,
                 what="the first full pass")  # fmt: skip
        stop_spies(spies)
        row["restart_resync_s"] = round(max(metric(o, "vllm_pooling_operator_first_pass_seconds") for o in again), 2)
        row["restart_wall_s"] = round(time.monotonic() - restarted, 2)
        reads, writes, by = split(audit.since(mark))
        row["restart_writes"], row["restart_reads"], row["restart_requests"] = writes, reads, by
        figures = [proc_figures(o.proc.pid) for o in again]  # type: ignore[union-attr]
        rss2, cpu2 = max(f[0] for f in figures), sum(f[1] for f in figures)
        row["restart_peak_rss_mb"], row["restart_cpu_s"] = round(rss2, 1), round(cpu2, 1)
        say(f"N={n}: restart: first full pass {row['restart_resync_s']}s after start ({row['restart_wall_s']}s wall), "
            f"{writes} writes, {reads} reads")

        # 5. once the burst is absorbed: PACED more services, one every 200 ms, while the N exist
        extra = [dict(o, metadata={"name": f"paced-{i:03d}", "namespace": homes[i % len(homes)]})
                 for i, o in enumerate(services(PACED, "bench"))]
        answered = asyncio.run(create_paced(cp, extra, 0.2))
        wait_for(lambda: all(o["metadata"]["name"] in watch.seen for o in extra), timeout=600, what="paced Deployments")
        p50, p99 = percentiles(watch, answered, extra)
        row["p50_create_to_deployment_s"], row["p99_create_to_deployment_s"] = p50, p99
        say(f"N={n}: {PACED} more services, one every 200 ms: create->Deployment p50 {p50}s p99 {p99}s")
        watch.stop()
        for o in again:
            o.stop()
    finally:
        for o in ops:
            o.stop()
        cp.stop()
    return row


def operators(cp: ControlPlane, kubeconfig: Path, label: str) -> list[OperatorProcess]:
    """SHARDS operator processes, started: one (as before) or shard i of SHARDS each (`--shard i/N`, own namespaces)."""
    out = []
    for i in range(SHARDS):
        extra = ["--shard", f"{i}/{SHARDS}"] if SHARDS > 1 else []
        name = label if SHARDS == 1 else f"{label}-shard-{i}"
        out.append(OperatorProcess(cp, name, resync_seconds=30, standalone=True, kubeconfig=kubeconfig, extra=extra).start(timeout=120))
    return out


def restart_once(cp: ControlPlane, kubeconfig: Path, label: str, profile: Path | None, code: Path | None = None) -> dict[str, Any]:
    """Start an operator over what exists; until its first full pass: seconds, wall, requests, peak RSS. `code`: a
    checkout whose operator/ the process imports instead of this tree's (--before)."""
    audit = cp.audit
    mark = audit.mark()
    started = time.monotonic()
    op = OperatorProcess(cp, label, resync_seconds=30, standalone=True, kubeconfig=kubeconfig)
    if code is not None:
        op.env["PYTHONPATH"] = str(code / "operator")  # ahead of the venv's editable path to this tree
    spies: list[subprocess.Popen[bytes]] = []
    try:
        op.start(timeout=120)
        spies = spy_on([op], profile, label)
        wait_for(lambda: metric(op, "vllm_pooling_operator_first_pass_seconds") > 0, timeout=900, interval=0.5, what="the first full pass")
        row: dict[str, Any] = {"first_pass_s": round(metric(op, "vllm_pooling_operator_first_pass_seconds"), 2),
                               "wall_s": round(time.monotonic() - started, 2)}  # fmt: skip
        reads, writes, by = split(audit.since(mark))
        rss, cpu = proc_figures(op.proc.pid)  # type: ignore[union-attr]
        row.update(reads=reads, writes=writes, requests=by, peak_rss_mb=round(rss, 1), cpu_s=round(cpu, 1))
        return row
    finally:
        stop_spies(spies)
        op.stop()


def spy_on(ops: list[OperatorProcess], profile: Path | None, label: str) -> list[subprocess.Popen[bytes]]:
    """With --profile: a py-spy recording (speedscope, 50 Hz, not stopping the process) of each operator, into DIR/LABEL[-i].json."""
    if profile is None:
        return []
    profile.mkdir(parents=True, exist_ok=True)
    exe = os.environ.get("PY_SPY", "py-spy")
    return [subprocess.Popen([exe, "record", "--pid", str(o.proc.pid), "--rate", "50", "--nonblocking",  # type: ignore[union-attr]
                              "--format", "speedscope", "-o", str(profile / f"{label}{'' if len(ops) == 1 else f'-{i}'}.json")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for i, o in enumerate(ops)]  # fmt: skip


def stop_spies(spies: list[subprocess.Popen[bytes]]) -> None:
    for spy in spies:
        spy.send_signal(signal.SIGINT)
        spy.wait(timeout=60)


def run_restarts(n: int, restarts: int, keep: bool, profile: Path | None, before: Path | None = None) -> dict[str, Any]:
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
            wait_for(lambda: ready_count(cp, ["bench"]) >= n, timeout=creation_timeout(n), interval=2, what=f"{n} services Ready")
            row["all_ready_s"] = round(time.monotonic() - started, 2)
            rss, cpu = proc_figures(op.proc.pid)  # type: ignore[union-attr]
            row["operator_peak_rss_mb"], row["operator_cpu_s"] = round(rss, 1), round(cpu, 1)
            say(f"N={n}: {n} services Ready in {row['all_ready_s']}s; operator peak RSS {rss:.0f} MiB, CPU {cpu:.1f}s")
        finally:
            op.stop()
        runs = []
        # with --before: before, after, before, after ... on the same objects, so the two codes share the cluster's state
        codes: list[tuple[str, Path | None]] = [("before", before), ("after", None)] if before else [("", None)]
        for i in range(restarts):
            for which, code in codes:
                name = f"operator-restart-{i + 1}{'-' + which if which else ''}"
                r = restart_once(cp, kubeconfig, name, profile / f"n{n}" if profile else None, code)
                if which:
                    r["code"] = which
                runs.append(r)
                say(f"N={n}: restart {i + 1}{' (' + which + ')' if which else ''}: first full pass {r['first_pass_s']}s "
                    f"({r['wall_s']}s wall), {r['writes']} writes, {r['reads']} reads, peak RSS {r['peak_rss_mb']:.0f} MiB, CPU {r['cpu_s']}s")
        row["restart_runs"] = runs
        for which, _ in codes:
            mine = [r for r in runs if r.get("code", "") == which]
            suffix = f"_{which}" if which else ""
            row[f"restart_median_s{suffix}"] = statistics.median(r["first_pass_s"] for r in mine)
            row[f"restart_cpu_median_s{suffix}"] = statistics.median(r["cpu_s"] for r in mine)
            row[f"restart_peak_rss_mb{suffix}"] = max(r["peak_rss_mb"] for r in mine)
            say(f"N={n}: restart{' (' + which + ')' if which else ''} median {row[f'restart_median_s{suffix}']}s, "
                f"CPU {row[f'restart_cpu_median_s{suffix}']}s, peak RSS {row[f'restart_peak_rss_mb{suffix}']:.0f} MiB")
    finally:
        cp.stop()
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, action="append", help="services (repeatable); default 100, 500, 1000")
    p.add_argument("--steady", type=float, default=300, help="steady-state window in seconds (default 300)")
    p.add_argument("--keep", action="store_true", help="keep each run's folder (logs, audit log)")
    p.add_argument("--namespaces", type=int, default=1, help="spread the services over this many namespaces (default 1)")
    p.add_argument("--shards", type=int, default=1,
                   help="operator processes, each --shard i/N owning the namespaces whose hash mod N is i (default 1); "
                   "use with --namespaces")
    p.add_argument("--gpus-per-node", type=int, default=8,
                   help="GPUs of each kwok node (default 8; fewer nodes, fewer node Lease renewals)")
    p.add_argument("--no-floor", dest="floor", action="store_false",
                   help="skip the floor (a run that checks creation, idle, restart and paced creates; no ratio)")
    p.add_argument("--policy", action="store_true",
                   help="a default AutoscalingPolicy the autoscaled services follow (its status counts them as they come)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reconcile.json")
    p.add_argument("--only", choices=["restart"], help="restart: only the restart phase, --restarts times (see above)")
    p.add_argument("--restarts", type=int, default=3, help="restarts per N with --only restart (default 3)")
    p.add_argument("--label", default="", help="with --only restart: a name for this set of rows (before, after)")
    p.add_argument("--before", type=Path,
                   help="with --only restart: a checkout of the code to compare (git worktree add DIR COMMIT); each restart "
                   "runs it, then this tree, on the same services")
    p.add_argument("--profile", type=Path, help="py-spy speedscope profiles of the creation and each restart here (DIR/nN/...)")
    args = p.parse_args()
    global GPUS_PER_NODE, NAMESPACES, SHARDS, POLICY, FLOOR
    GPUS_PER_NODE, NAMESPACES, SHARDS, POLICY, FLOOR = args.gpus_per_node, args.namespaces, args.shards, args.policy, args.floor
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: stop the operator and the control plane
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
               "date": time.strftime("%Y-%m-%d"), "operator_workers": CONCURRENCY, "gpus_per_node": GPUS_PER_NODE,
               "namespaces": NAMESPACES, "shards": SHARDS, "policy": POLICY, "floor": FLOOR}
    runs = []
    for n in args.n or [100, 500, 1000]:
        if args.only == "restart":
            runs.append(run_restarts(n, args.restarts, args.keep, args.profile, args.before))
        else:
            runs.append(run_one(n, args.steady, args.keep, args.profile))
        if args.only is None:  # the runs replace the file's; restart rows recorded before stay
            args.out.parent.mkdir(parents=True, exist_ok=True)
            before = json.loads(args.out.read_text()) if args.out.exists() else {}
            kept = {"restart": before["restart"]} if "restart" in before else {}
            args.out.write_text(json.dumps({"machine": machine, "runs": runs, **kept}, indent=2) + "\n")
    if args.only == "restart":  # the full runs stay; restart rows are added under "restart"
        recorded = json.loads(args.out.read_text()) if args.out.exists() else {"machine": machine, "runs": []}
        recorded.setdefault("restart", []).append({"machine": machine, "label": args.label, "runs": runs})
        args.out.write_text(json.dumps(recorded, indent=2) + "\n")
        for which in ("before", "after") if args.before else ("",):
            suffix = f"_{which}" if which else ""
            print(f"N / first full pass (median of {args.restarts}) / peak RSS{' (' + which + ')' if which else ''}: " + "; ".join(
                f"{r['n']}: {r['restart_median_s' + suffix]}s / {r['restart_peak_rss_mb' + suffix]:.0f} MiB" for r in runs))
    print(json.dumps(runs, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
