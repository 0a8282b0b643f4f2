"""Faults on a real local control plane: the operator SIGKILLed mid-rollout, kube-apiserver and etcd restarted
mid-reconcile, and an API server that throttles. Not part of `make test`; prints figures and writes
bench/results/chaos.json.

1. **kill** (`--trials`, default 20; `-n` services per trial, default 200): in a fresh namespace, the N
   PoolingServices are created (16 in flight) and the operator process is SIGKILLed at a random moment of the
   rollout (uniform in [0.5 s, `--kill-window`] after the first create), then started again at once. Each
   trial asserts and records, once converged: every service has exactly the children `pooling-operator render`
   makes of it (kind/name; none missing, none extra, no duplicate), the Deployment's vLLM argv is the rendered
   one, no orphan (a managed child whose controller is not a live service), status current (observedGeneration
   = generation) with Ready=True; the operator's events per service (max, total); seconds from the restart to
   convergence. The namespace is deleted in the background while the next trial runs.
2. **apiserver** / **etcd**: N services created, and `--down` seconds into the rollout kube-apiserver (or etcd)
   is stopped for `--down` seconds, then started again. Recorded: the operator process stays up (no crash, no
   restart), its own requests while the API was down (client-side counter
   `vllm_pooling_operator_api_requests_total`, per second), its log lines and error lines per second meanwhile
   (kopf's watch retries log one line each), the audit log's answers by status code, and the seconds from the
   API's return to convergence (same checks as 1).
3. **throttle**: a second control plane whose API server runs without API Priority and Fairness and with
   `--max-requests-inflight=THROTTLE_READS --max-mutating-requests-inflight=THROTTLE_WRITES`; the N services are
   created and the run records the 429s the operator got (audit log), its error and warning log lines, and
   the time to convergence.

    .venv/bin/python bench/chaos/run.py                       # everything, about 35 minutes
    .venv/bin/python bench/chaos/run.py --trials 3 -n 50 --only kill
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import itertools
import json
import math
import os
import platform
import random
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

from e2e.harness.audit import OPERATOR_USER  # noqa: E402
from e2e.harness.config import GPU_PRODUCT, ClusterConfig  # noqa: E402
from e2e.harness.poll import wait_for  # noqa: E402
from e2e.kube.controlplane import ControlPlane  # noqa: E402
from e2e.kube.crds import install_crds  # noqa: E402
from e2e.operator_process import OperatorProcess, least_privilege_kubeconfig  # noqa: E402

API = "/apis/vllm-pooling.io/v1alpha1"
REVISION = "0" * 40
CONCURRENCY = 16
MANAGED = "app.kubernetes.io/managed-by=vllm-pooling-operator"
CHILD_PATHS = {
    "Deployment": "/apis/apps/v1/namespaces/{ns}/deployments",
    "Service": "/api/v1/namespaces/{ns}/services",
    "PodDisruptionBudget": "/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
    "ServiceMonitor": "/apis/monitoring.coreos.com/v1/namespaces/{ns}/servicemonitors",
    "ScaledObject": "/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
}
EVENTS_PER_SERVICE_BOUND = 12  # an event storm is more than this many operator events on one service
THROTTLE_READS, THROTTLE_WRITES = 8, 3
OPERATOR_EVENTS = "vllm-pooling-operator"


def say(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------------------
# What is created and what it should become


def services(n: int, namespace: str) -> list[dict[str, Any]]:
    """N PoolingServices, one GPU each: embed and classify; every tenth autoscaled by the operator (no
    Prometheus: it holds the replicas), every twentieth by KEDA (a ScaledObject), every seventh with a
    ServiceMonitor."""
    gpu = {"gpu": {"count": 1, "product": GPU_PRODUCT}}
    out = []
    for i in range(n):
        task = ("embed", "classify")[i % 2]
        model = "sentence-transformers/all-MiniLM-L6-v2" if task == "embed" else "cardiffnlp/twitter-roberta-base-sentiment"
        spec: dict[str, Any] = {"model": {"name": model, "revision": REVISION}, "task": task, "resources": gpu}
        if i % 10 == 0:
            spec["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, "queueDepthPerReplica": 8}
        elif i % 20 == 5:
            spec["autoscaling"] = {"minReplicas": 1, "maxReplicas": 2, "backend": "keda", "queueDepthPerReplica": 8}
        if i % 7 == 3:
            spec["monitoring"] = {"serviceMonitor": True}
        out.append({"apiVersion": "vllm-pooling.io/v1alpha1", "kind": "PoolingService",
                    "metadata": {"name": f"svc-{i:04d}", "namespace": namespace}, "spec": spec})
    return out


_RENDERED: dict[int, dict[str, dict[tuple[str, str], dict[str, Any]]]] = {}


def rendered(objs: list[dict[str, Any]]) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """`pooling-operator render` of the services: service name -> {(kind, name): object} (the same for every
    namespace: rendered once per N)."""
    if len(objs) in _RENDERED:
        return _RENDERED[len(objs)]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(yaml.safe_dump_all(objs))
    out = subprocess.run([sys.executable, "-m", "pooling_operator.cli", "render", f.name], capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    want: dict[str, dict[tuple[str, str], dict[str, Any]]] = collections.defaultdict(dict)
    for doc in yaml.safe_load_all(out):
        if not doc or doc["kind"] == "PoolingService":
            continue
        owner = doc["metadata"]["labels"]["app.kubernetes.io/instance"]  # render sets no owner reference
        want[owner][(doc["kind"], doc["metadata"]["name"])] = doc
    _RENDERED[len(objs)] = dict(want)
    return _RENDERED[len(objs)]


# ---------------------------------------------------------------------------------------------------------
# Convergence


class Checker:
    """Reads a namespace and says what is not yet as `pooling-operator render` wants it."""

    def __init__(self, cp: ControlPlane, namespace: str, want: dict[str, dict[tuple[str, str], dict[str, Any]]],
                 *, require_ready: bool = True) -> None:
        self.cp, self.ns, self.want = cp, namespace, want
        # False: Ready must only agree with the Deployment (after an API outage kube-controller-manager marks the
        # fake nodes' pods not Ready and kwok, no real kubelet, never marks them Ready again)
        self.require_ready = require_ready
        self.ready = 0
        self.kinds = sorted({k for children in want.values() for (k, _) in children})
        self.last: list[str] = []

    def problems(self) -> list[str]:
        api = self.cp.api
        assert api is not None
        owners = api.get(f"{API}/namespaces/{self.ns}/poolingservices", timeout=60)["items"]
        by_uid = {o["metadata"]["uid"]: o["metadata"]["name"] for o in owners}
        problems: list[str] = []
        if len(owners) != len(self.want):
            problems.append(f"{len(owners)}/{len(self.want)} services")
        for o in owners:
            st = o.get("status") or {}
            ready = {c["type"]: c["status"] for c in st.get("conditions") or []}.get("Ready")
            if st.get("observedGeneration") != o["metadata"]["generation"]:
                problems.append(f"{o['metadata']['name']}: observedGeneration {st.get('observedGeneration')} != {o['metadata']['generation']}")
            elif ready is None or (self.require_ready and ready != "True"):
                problems.append(f"{o['metadata']['name']}: Ready={ready}")
        have: dict[str, list[tuple[str, str]]] = collections.defaultdict(list)
        deployments: dict[str, dict[str, Any]] = {}
        for kind in self.kinds:
            items = api.get(CHILD_PATHS[kind].format(ns=self.ns) + f"?labelSelector={MANAGED}", timeout=60)["items"]
            for c in items:
                ref = next((r for r in c["metadata"].get("ownerReferences") or [] if r.get("controller")), None)
                if ref is None or ref["uid"] not in by_uid:
                    problems.append(f"orphan {kind}/{c['metadata']['name']} (owner {ref and ref['name']})")
                    continue
                have[by_uid[ref["uid"]]].append((kind, c["metadata"]["name"]))
                if kind == "Deployment":
                    deployments[c["metadata"]["name"]] = c
        if not self.require_ready:  # Ready as the Deployment says
            for o in owners:
                name = o["metadata"]["name"]
                dep = deployments.get(name)
                ready = {c["type"]: c["status"] for c in (o.get("status") or {}).get("conditions") or []}.get("Ready")
                if dep is not None:
                    want_ready = (dep.get("status") or {}).get("readyReplicas", 0) >= (dep["spec"].get("replicas") or 0)
                    if (ready == "True") != want_ready:
                        problems.append(f"{name}: Ready={ready} but the Deployment has {(dep.get('status') or {}).get('readyReplicas', 0)} ready")
        self.ready = sum(1 for o in owners if {c["type"]: c["status"] for c in (o.get("status") or {}).get("conditions") or []}.get("Ready") == "True")
        for name, children in self.want.items():
            got = have.get(name, [])
            if len(got) != len(set(got)):
                problems.append(f"{name}: duplicate children {sorted(got)}")
            if set(got) != set(children):
                missing, extra = set(children) - set(got), set(got) - set(children)
                problems.append(f"{name}: missing {sorted(missing)} extra {sorted(extra)}")
                continue
            dep = deployments.get(name)
            want_dep = children.get(("Deployment", name))
            if dep is not None and want_dep is not None:
                c0 = dep["spec"]["template"]["spec"]["containers"][0]
                w0 = want_dep["spec"]["template"]["spec"]["containers"][0]
                if (c0.get("image"), c0.get("command"), c0.get("args")) != (w0.get("image"), w0.get("command"), w0.get("args")):
                    problems.append(f"{name}: Deployment's vLLM container differs from the render")
        self.last = problems
        return problems

    def converged(self) -> bool:
        try:
            return not self.problems()
        except Exception as exc:  # the API may be coming back
            self.last = [f"{type(exc).__name__}: {exc}"]
            return False


def events(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    """The operator's events in the namespace: total, max per service, and the reasons."""
    items = cp.api.get(f"/api/v1/namespaces/{namespace}/events", timeout=60)["items"]  # type: ignore[union-attr]
    ours = [e for e in items if (e.get("source") or {}).get("component") == OPERATOR_EVENTS or e.get("reportingComponent") == OPERATOR_EVENTS]
    per: collections.Counter[str] = collections.Counter()
    reasons: collections.Counter[str] = collections.Counter()
    for e in ours:
        n = int(e.get("count") or 1)
        per[e["involvedObject"]["name"]] += n
        reasons[e["reason"]] += n
    return {"total": sum(per.values()), "max_per_service": max(per.values(), default=0),
            "max_service": per.most_common(1)[0][0] if per else None, "reasons": dict(reasons.most_common())}


# ---------------------------------------------------------------------------------------------------------
# Creating, the operator, its metrics and log


def http(cp: ControlPlane) -> httpx.AsyncClient:
    import ssl

    ctx = ssl.create_default_context(cafile=str(cp.pki["ca.crt"]))
    ctx.load_cert_chain(str(cp.pki["admin.crt"]), str(cp.pki["admin.key"]))
    return httpx.AsyncClient(base_url=cp.server, verify=ctx, timeout=60,
                             limits=httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=CONCURRENCY))


async def create_all(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    """POST every object, CONCURRENCY at a time; 429/5xx and broken connections are retried (the API server
    may be down or throttling: that is the point)."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for o in objs:
        queue.put_nowait(o)
    async with http(cp) as client:
        async def worker() -> None:
            while not queue.empty():
                o = queue.get_nowait()
                url = f"{API}/namespaces/{o['metadata']['namespace']}/poolingservices"
                for attempt in range(400):
                    try:
                        r = await client.post(url, json=o)
                    except httpx.HTTPError:
                        await asyncio.sleep(0.5)
                        continue
                    if r.status_code in (201, 409):  # 409: created before a connection broke
                        break
                    if r.status_code in (429, 500, 502, 503, 504):
                        await asyncio.sleep(min(2.0, 0.2 * (attempt + 1)))
                        continue
                    raise RuntimeError(f"create {o['metadata']['name']}: {r.status_code} {r.text[:300]}")
                else:
                    raise RuntimeError(f"create {o['metadata']['name']}: gave up")

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))


def create_in_background(cp: ControlPlane, objs: list[dict[str, Any]]) -> threading.Thread:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            asyncio.run(create_all(cp, objs))
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.errors = errors  # type: ignore[attr-defined]
    t.start()
    return t


def new_namespace(cp: ControlPlane, name: str) -> str:
    api = cp.api
    assert api is not None
    status, body = api.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    assert status == 201, body
    wait_for(lambda: api.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")[0] == 200, timeout=60, what=f"{name} default SA")
    return name


def api_requests(op: OperatorProcess) -> float:
    """The operator's own requests so far (client-side counter, watches aside)."""
    try:
        text = op.metrics()
    except OSError:
        return float("nan")
    return sum(float(m) for m in re.findall(r"^vllm_pooling_operator_api_requests_total\{[^}]*\} (\S+)$", text, re.M))


class LogWindow:
    """Lines of the operator's log written between mark() and read()."""

    ERROR = re.compile(r"\b(ERROR|CRITICAL|Traceback)\b")
    WARNING = re.compile(r"\bWARNING\b")

    def __init__(self, op: OperatorProcess) -> None:
        self.op = op
        self.pos = 0

    def mark(self) -> None:
        self.pos = self.op.log.stat().st_size if self.op.log.exists() else 0

    def read(self) -> list[str]:
        with self.op.log.open("rb") as f:
            f.seek(self.pos)
            return f.read().decode(errors="replace").splitlines()

    @classmethod
    def summary(cls, lines: list[str], seconds: float) -> dict[str, Any]:
        errors = [ln for ln in lines if cls.ERROR.search(ln)]
        warnings = [ln for ln in lines if cls.WARNING.search(ln)]
        kinds = collections.Counter(re.sub(r"\d+", "N", ln.split("] ", 1)[-1])[:90] for ln in errors + warnings)
        return {"lines": len(lines), "error_lines": len(errors), "warning_lines": len(warnings),
                "lines_per_s": round(len(lines) / seconds, 2) if seconds else None,
                "error_lines_per_s": round(len(errors) / seconds, 2) if seconds else None,
                "top": dict(kinds.most_common(5))}


def audit_codes(cp: ControlPlane, mark: int, end: int | None = None) -> dict[str, int]:
    """The operator's requests in the audit log since `mark` (and before `end`), by response code."""
    codes: collections.Counter[str] = collections.Counter()
    path = cp.run_dir / "audit.log"
    if not path.exists():
        return {}
    with path.open("rb") as f:
        f.seek(mark)
        data = f.read() if end is None else f.read(max(0, end - mark))
    for line in data.splitlines():
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if (e.get("user") or {}).get("username") != OPERATOR_USER or e.get("verb") == "watch":
            continue
        codes[str((e.get("responseStatus") or {}).get("code", "?"))] += 1
    return dict(sorted(codes.items()))


def stats(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 2), "median": round(statistics.median(values), 2), "max": round(max(values), 2)} if values else {}


# ---------------------------------------------------------------------------------------------------------
# The scenarios


def cluster_config(n: int, *, apiserver: list[str] | None = None) -> ClusterConfig:
    qps = ["--kube-api-qps=300", "--kube-api-burst=600"]
    extra = {"kube-controller-manager": [*qps, "--concurrent-deployment-syncs=20", "--concurrent-replicaset-syncs=20"],
             "kube-scheduler": qps}
    if apiserver:
        extra["kube-apiserver"] = apiserver
    # two namespaces' worth of GPUs: the previous trial's namespace is deleted while the next one rolls out
    return ClusterConfig(gpu_nodes=math.ceil(2 * n / 8) + 2, gpus_per_node=8, cpu_nodes=1, start_timeout=300,
                         audit_users=(OPERATOR_USER,), extra_args=extra)


def start_operator(cp: ControlPlane, kubeconfig: Path, name: str) -> OperatorProcess:
    return OperatorProcess(cp, name, resync_seconds=30, standalone=True, kubeconfig=kubeconfig).start(timeout=120)


def kill_trial(cp: ControlPlane, kubeconfig: Path, op: OperatorProcess, i: int, n: int, window: float,
               rng: random.Random, timeout: float, ops: list[OperatorProcess]) -> tuple[OperatorProcess, dict[str, Any]]:
    ns = new_namespace(cp, f"chaos-kill-{i:02d}")
    objs = services(n, ns)
    checker = Checker(cp, ns, rendered(objs))
    delay = rng.uniform(0.5, window)
    started = time.monotonic()
    creator = create_in_background(cp, objs)
    wait_for(lambda: time.monotonic() - started >= delay, timeout=delay + 5, what="the kill moment")
    deployments_at_kill = len(cp.api.get(f"/apis/apps/v1/namespaces/{ns}/deployments", timeout=60)["items"])  # type: ignore[union-attr]
    assert op.proc is not None
    os.killpg(op.proc.pid, signal.SIGKILL)
    op.proc.wait(timeout=10)
    restarted = time.monotonic()
    op = OperatorProcess(cp, f"operator-{i:02d}", resync_seconds=30, standalone=True, kubeconfig=kubeconfig)
    ops.append(op)  # stopped by main() whatever happens next
    op.start(timeout=120)
    creator.join(timeout=600)
    assert not creator.errors, creator.errors  # type: ignore[attr-defined]
    created = time.monotonic() - started
    wait_for(checker.converged, timeout=timeout, interval=1.0, max_interval=1.0, what=f"trial {i} converged: {checker.last[:5]}")
    converge = time.monotonic() - restarted
    ev = events(cp, ns)
    sweeps = [ln.split("] ", 1)[-1] for ln in op.log.read_text(errors="replace").splitlines() if "Re-listed" in ln]
    row = {"trial": i, "namespace": ns, "services": n, "kill_after_s": round(delay, 2), "deployments_at_kill": deployments_at_kill,
           "creates_done_s": round(created, 2), "converged_after_restart_s": round(converge, 2), "events": ev,
           "relist_sweeps_logged": sweeps}
    assert ev["max_per_service"] <= EVENTS_PER_SERVICE_BOUND, f"event storm: {ev}"
    say(f"trial {i}: killed {delay:.1f}s into the rollout ({deployments_at_kill}/{n} Deployments), converged "
        f"{converge:.1f}s after the restart; events total {ev['total']}, max {ev['max_per_service']} per service")
    deleted = time.monotonic()
    cp.api.request("DELETE", f"/api/v1/namespaces/{ns}")  # type: ignore[union-attr]
    # the next trial starts on a quiet cluster: this namespace gone, with everything in it
    wait_for(lambda: cp.api.request("GET", f"/api/v1/namespaces/{ns}")[0] == 404, timeout=600, interval=1.0,  # type: ignore[union-attr]
             max_interval=2.0, what=f"namespace {ns} deleted")
    row["namespace_deleted_s"] = round(time.monotonic() - deleted, 2)
    return op, row


def outage(cp: ControlPlane, kubeconfig: Path, op: OperatorProcess, component: str, n: int, down: float, timeout: float) -> dict[str, Any]:
    ns = new_namespace(cp, f"chaos-{component}")
    objs = services(n, ns)
    checker = Checker(cp, ns, rendered(objs), require_ready=False)
    pid = op.proc.pid  # type: ignore[union-attr]
    started = time.monotonic()
    creator = create_in_background(cp, objs)
    wait_for(lambda: time.monotonic() - started >= down, timeout=down + 5, what="mid-rollout")
    deployments = len(cp.api.get(f"/apis/apps/v1/namespaces/{ns}/deployments", timeout=60)["items"])  # type: ignore[union-attr]
    logs = LogWindow(op)
    before = api_requests(op)
    logs.mark()
    audit_mark = cp.audit.mark()
    cp.stop_component(component)
    t_down = time.monotonic()
    samples = []  # (seconds since down, requests so far) every second
    while time.monotonic() - t_down < down:
        samples.append((round(time.monotonic() - t_down, 1), api_requests(op) - before))
        time.sleep(1.0)
    during = api_requests(op) - before
    down_s = time.monotonic() - t_down
    down_lines = logs.read()
    cp.start_component(component, timeout=120)
    back = time.monotonic()
    audit_back = cp.audit.mark()
    wait_for(checker.converged, timeout=timeout, interval=1.0, max_interval=1.0, what=f"{component} outage converged: {checker.last[:5]}")
    converge = time.monotonic() - back
    creator.join(timeout=600)
    assert op.proc is not None and op.proc.poll() is None and op.proc.pid == pid, "the operator process exited"
    ev = events(cp, ns)
    # the per-second peak of the client-side counter while the API was down
    steps = [b[1] - a[1] for a, b in itertools.pairwise(samples)]
    row = {"component": component, "services": n, "deployments_when_stopped": deployments, "down_s": round(down_s, 1),
           "operator_requests_while_down": during, "operator_requests_per_s_while_down": round(during / down_s, 2),
           "operator_requests_peak_per_s": max(steps, default=0.0),
           "operator_log_while_down": LogWindow.summary(down_lines, down_s),
           "operator_answers_while_down": audit_codes(cp, audit_mark, audit_back),
           "operator_answers_after": audit_codes(cp, audit_back),
           "converged_after_back_s": round(converge, 2), "ready_when_converged": checker.ready, "operator_restarts": 0, "events": ev}
    say(f"{component} down {down_s:.0f}s mid-rollout ({deployments}/{n} Deployments): operator sent {during:.0f} requests "
        f"({row['operator_requests_per_s_while_down']}/s), logged {row['operator_log_while_down']['lines']} lines "
        f"({row['operator_log_while_down']['error_lines']} errors); converged {converge:.1f}s after it came back")
    cp.api.request("DELETE", f"/api/v1/namespaces/{ns}")  # type: ignore[union-attr]
    return row


def throttle(n: int, timeout: float, keep: bool) -> dict[str, Any]:
    flags = ["--enable-priority-and-fairness=false", f"--max-requests-inflight={THROTTLE_READS}",
             f"--max-mutating-requests-inflight={THROTTLE_WRITES}"]
    run_dir = Path(tempfile.mkdtemp(prefix="vpo-chaos-throttle-"))
    cp = ControlPlane(cluster_config(n, apiserver=flags), run_dir=run_dir, keep_run_dir=keep).start()
    op: OperatorProcess | None = None
    try:
        install_crds(cp)
        kubeconfig = least_privilege_kubeconfig(cp)
        op = OperatorProcess(cp, "operator-throttled", resync_seconds=30, standalone=True, kubeconfig=kubeconfig)
        op.start(timeout=120)
        ns = new_namespace(cp, "chaos-throttle")
        objs = services(n, ns)
        checker = Checker(cp, ns, rendered(objs))
        logs = LogWindow(op)
        logs.mark()
        mark = cp.audit.mark()
        started = time.monotonic()
        asyncio.run(create_all(cp, objs))
        wait_for(checker.converged, timeout=timeout, interval=2.0, max_interval=2.0, what=f"throttled rollout converged: {checker.last[:5]}")
        seconds = time.monotonic() - started
        codes = audit_codes(cp, mark)
        lines = logs.read()
        ev = events(cp, ns)
        apiserver_429 = _apiserver_rejections(cp)
        row = {"flags": flags, "services": n, "converged_s": round(seconds, 2), "operator_answers": codes,
               "operator_429": codes.get("429", 0), "operator_requests": sum(codes.values()),
               "apiserver_rejected_total": apiserver_429,
               "operator_log": LogWindow.summary(lines, seconds), "events": ev}
        say(f"throttled ({' '.join(flags)}): {n} services converged in {seconds:.1f}s; the operator got "
            f"{row['operator_429']} 429s in {row['operator_requests']} requests, logged {row['operator_log']['error_lines']} error lines")
        return row
    finally:
        if op is not None:
            op.stop()
        cp.stop()


def _apiserver_rejections(cp: ControlPlane) -> dict[str, float]:
    status, text = cp.api.request("GET", "/metrics")  # type: ignore[union-attr]
    out: dict[str, float] = {}
    for m in re.finditer(r'^apiserver_dropped_requests_total\{([^}]*)\} (\S+)$|^apiserver_request_terminations_total\{([^}]*)\} (\S+)$', text if status == 200 else "", re.M):
        labels, value = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
        out[labels] = out.get(labels, 0) + float(value)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", type=int, default=200, help="services per trial (default 200)")
    p.add_argument("--trials", type=int, default=20)
    p.add_argument("--outage-n", type=int, help="services in the apiserver/etcd outages (default: -n)")
    p.add_argument("--throttle-n", type=int, help="services in the throttled rollout (default: -n)")
    p.add_argument("--kill-window", type=float, default=20.0, help="the kill falls uniformly in [0.5 s, this] after the first create")
    p.add_argument("--down", type=float, default=20.0, help="seconds kube-apiserver / etcd stay down (also: how far into the rollout)")
    p.add_argument("--timeout", type=float, default=600.0, help="per convergence wait")
    p.add_argument("--seed", type=int, default=13)
    p.add_argument("--only", choices=["kill", "outages", "throttle"], action="append")
    p.add_argument("--keep", action="store_true", help="keep the run folders (logs, audit log)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "chaos.json")
    p.add_argument("--operator-src", type=Path, help="run the operator (and render) from this copy of operator/ "
                   "(PYTHONPATH), e.g. a snapshot while the work tree is being edited")
    args = p.parse_args()
    if args.operator_src:
        os.environ["PYTHONPATH"] = str(args.operator_src.resolve())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    only = set(args.only or ["kill", "outages", "throttle"])
    rng = random.Random(args.seed)
    machine = {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
               "date": time.strftime("%Y-%m-%d"), "load_at_start": os.getloadavg()}
    # sections not run this time keep their last results
    result: dict[str, Any] = json.loads(args.out.read_text()) if args.out.exists() else {}
    result.setdefault("runs_settings", {})
    for section in only:
        result["runs_settings"][section] = {"machine": machine, **{k: str(v) for k, v in vars(args).items()}}

    def save() -> None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")

    t0 = time.monotonic()
    if only & {"kill", "outages"}:
        run_dir = Path(tempfile.mkdtemp(prefix="vpo-chaos-"))
        cp = ControlPlane(cluster_config(max(args.n, args.outage_n or 0)), run_dir=run_dir, keep_run_dir=args.keep).start()
        ops: list[OperatorProcess] = []
        try:
            install_crds(cp)
            kubeconfig = least_privilege_kubeconfig(cp)
            op = start_operator(cp, kubeconfig, "operator-00")
            ops.append(op)
            if "kill" in only:
                trials = []
                for i in range(1, args.trials + 1):
                    op, row = kill_trial(cp, kubeconfig, op, i, args.n, args.kill_window, rng, args.timeout, ops)
                    trials.append(row)
                    conv = [t["converged_after_restart_s"] for t in trials]
                    result["kill"] = {"trials": len(trials), "services_per_trial": args.n, "converged_after_restart_s": stats(conv),
                                      "events_total": stats([t["events"]["total"] for t in trials]),
                                      "events_max_per_service": max(t["events"]["max_per_service"] for t in trials),
                                      "runs": trials}
                    save()
            if "outages" in only:
                result["outages"] = [outage(cp, kubeconfig, op, c, args.outage_n or args.n, args.down, args.timeout) for c in ("kube-apiserver", "etcd")]
                save()
        finally:
            for o in ops:
                o.stop()
            cp.stop()
    if "throttle" in only:
        result["throttle"] = throttle(args.throttle_n or args.n, args.timeout * 2, args.keep)
        save()
    result["wall_s"] = round(time.monotonic() - t0, 1)
    save()
    summary = {k: v for k, v in result.get("kill", {}).items() if k != "runs"}
    print(json.dumps({"kill": summary, "outages": result.get("outages"), "throttle": result.get("throttle")}, indent=2, default=str))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
